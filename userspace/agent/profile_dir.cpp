#include "agent/profile_dir.hpp"

#include <fmt/format.h>
#include <grp.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <tuple>
#include <vector>

#include "base/error.hpp"

namespace bb::agent {

namespace fs = std::filesystem;

namespace {

// A name the agent writes: "cpu-..." or "alloc-..." ending in .pb.gz.
bool profile_name(const std::string& f) {
    return (f.starts_with("cpu-") || f.starts_with("alloc-")) && f.ends_with(".pb.gz");
}

}  // namespace

ProfileDir::ProfileDir(std::string dir, Retention retention, const std::string& group)
    : dir_(std::move(dir)), retention_(retention) {
    if (!group.empty()) {
        const struct group* g = getgrnam(group.c_str());
        if (!g) throw UserError(fmt::format("--output-group {}: no such group", group));
        group_ = g->gr_gid;
    }
    std::error_code ec;
    // Created private; one an operator made is left as it is (said if others can read it).
    if (!fs::exists(dir_, ec)) {
        fs::create_directories(dir_, ec);
        if (!ec) make_private_dir(dir_);
    }
    if (ec || access(dir_.c_str(), W_OK) != 0)
        throw UserError(
            fmt::format("--output {}: cannot write there: {}", dir_, ec ? ec.message() : std::strerror(errno)));
    struct stat st;
    if (stat(dir_.c_str(), &st) == 0 && (st.st_mode & (group_ == static_cast<gid_t>(-1) ? 077 : 007)))
        warning_ = fmt::format("--output {} is open to other users (mode {:04o}); each VM's subdirectory is not", dir_,
                               st.st_mode & 07777);
}

void ProfileDir::make_private_dir(const std::string& path) const {
    // Whatever the umask: the profiles of root's and other users' VMs are not theirs to read.
    if (group_ != static_cast<gid_t>(-1) && chown(path.c_str(), static_cast<uid_t>(-1), group_) != 0)
        throw UserError(fmt::format("cannot give {} to its group: {}", path, std::strerror(errno)));
    if (chmod(path.c_str(), group_ == static_cast<gid_t>(-1) ? 0700 : 0750) != 0)
        throw UserError(fmt::format("cannot make {} private: {}", path, std::strerror(errno)));
}

std::string ProfileDir::write(const FinishedProfile& p) {
    const std::string vm_dir = dir_ + "/" + p.dir_name;
    std::error_code ec;
    if (!fs::is_directory(fs::symlink_status(vm_dir, ec))) {
        if (!fs::create_directory(vm_dir, ec) && ec)
            throw UserError(fmt::format("cannot create {}: {}", vm_dir, ec.message()));
        if (fs::is_symlink(fs::symlink_status(vm_dir, ec)))
            throw UserError(fmt::format("cannot create {}: a link is there", vm_dir));
    }
    make_private_dir(vm_dir);  // again each time: a directory made by an older agent was 0755
    time_t t = static_cast<time_t>(p.start_unix_ns / 1'000'000'000ull);
    tm utc{};
    gmtime_r(&t, &utc);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &utc);
    // Milliseconds too: the last, partial interval of a VM can start in the second its previous
    // one did.
    const std::string name = fmt::format("{}-{}.{:03d}Z.pb.gz", p.kind, stamp, (p.start_unix_ns / 1'000'000) % 1000);
    const std::string path = vm_dir + "/" + name;
    write_file_atomically(path, p.pprof_gz, file_access());  // never through a link planted in the directory
    // Retention by count: the names sort by time.
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(vm_dir, ec)) {
        std::string f = e.path().filename().string();
        if (f.starts_with(p.kind + "-") && f.ends_with(".pb.gz")) files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    for (size_t i = 0; retention_.files && i + retention_.files < files.size(); i++) fs::remove(files[i], ec);
    return path;
}

size_t ProfileDir::sweep(const std::set<std::string>& live, int64_t now_unix_s) {
    struct File {
        int64_t mtime;
        std::string path;
        uint64_t size;
    };
    std::vector<File> files;
    std::vector<std::string> vm_dirs;
    std::error_code ec;
    // Two levels, as the agent writes them; a link or anything else is not looked into.
    for (const auto& d : fs::directory_iterator(dir_, ec)) {
        if (!d.is_directory(ec) || d.is_symlink(ec)) continue;
        vm_dirs.push_back(d.path().filename().string());
        for (const auto& e : fs::directory_iterator(d.path(), ec)) {
            struct stat st;
            if (!profile_name(e.path().filename().string()) || lstat(e.path().c_str(), &st) != 0 ||
                !S_ISREG(st.st_mode))
                continue;
            files.push_back({st.st_mtim.tv_sec, e.path().string(), static_cast<uint64_t>(st.st_size)});
        }
    }
    std::sort(files.begin(), files.end(),
              [](const File& a, const File& b) { return std::tie(a.mtime, a.path) < std::tie(b.mtime, b.path); });
    uint64_t total = 0;
    for (const File& f : files) total += f.size;
    size_t removed = 0;
    for (const File& f : files) {
        const bool old = now_unix_s - f.mtime > static_cast<int64_t>(retention_.age_s);
        if (!old && total <= retention_.bytes) break;  // the rest are newer
        if (fs::remove(f.path, ec)) removed++;
        total -= f.size;
    }
    // rmdir: only an empty directory goes, so a file written meanwhile keeps its own.
    for (const std::string& d : vm_dirs)
        if (!live.count(d)) rmdir((dir_ + "/" + d).c_str());
    return removed;
}

}  // namespace bb::agent
