#include "agent/profile_dir.hpp"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/error.hpp"
#include "run/output.hpp"

namespace bb::agent {

namespace fs = std::filesystem;

ProfileDir::ProfileDir(std::string dir, size_t retention) : dir_(std::move(dir)), retention_(retention) {
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec || access(dir_.c_str(), W_OK) != 0)
        throw UserError(fmt::format("--output {}: cannot write there: {}", dir_, ec ? ec.message() : std::strerror(errno)));
}

std::string ProfileDir::write(const FinishedProfile& p) {
    const std::string vm_dir = dir_ + "/" + p.dir_name;
    std::error_code ec;
    fs::create_directories(vm_dir, ec);
    if (ec) throw UserError(fmt::format("cannot create {}: {}", vm_dir, ec.message()));
    time_t t = static_cast<time_t>(p.start_unix_ns / 1'000'000'000ull);
    tm utc{};
    gmtime_r(&t, &utc);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &utc);
    // Milliseconds too: the last, partial interval of a VM can start in the second its previous
    // one did.
    const std::string name = fmt::format("{}-{}.{:03d}Z.pb.gz", p.kind, stamp, (p.start_unix_ns / 1'000'000) % 1000);
    const std::string path = vm_dir + "/" + name;
    write_file_atomically(path, p.pprof_gz);  // never through a link planted in the directory
    // Retention: the names sort by time.
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(vm_dir, ec)) {
        std::string f = e.path().filename().string();
        if (f.starts_with(p.kind + "-") && f.ends_with(".pb.gz")) files.push_back(e.path().string());
    }
    std::sort(files.begin(), files.end());
    for (size_t i = 0; retention_ && i + retention_ < files.size(); i++) fs::remove(files[i], ec);
    return path;
}

}  // namespace bb::agent
