#include "target/target_file.hpp"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace bb {

namespace {

UniqueFd open_in_root(pid_t pid, const std::string& path) {
    // The target's root as an O_PATH descriptor; the path is then resolved as if that were "/":
    // "..", absolute symlinks and magic links cannot leave it.
    UniqueFd root(::open(fmt::format("/proc/{}/root", pid).c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!root) return UniqueFd();
    open_how how{};
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    return UniqueFd(static_cast<int>(syscall(SYS_openat2, root.get(), path.c_str(), &how, sizeof how)));
}

bool on_fuse(pid_t pid, dev_t dev) {
    if (major(dev) != 0) return false;  // FUSE mounts have anonymous devices
    auto fuse = fuse_devices(pid);
    return std::find(fuse.begin(), fuse.end(), dev) != fuse.end();
}

}  // namespace

std::vector<dev_t> fuse_devices(pid_t pid) {
    // "36 35 0:51 / /mnt rw,nosuid - fuse.sshfs host:/ rw": the device, and after " - " the type.
    std::vector<dev_t> out;
    std::ifstream in(fmt::format("/proc/{}/mountinfo", pid));
    std::string line;
    for (size_t n = 0; n < (1u << 16) && std::getline(in, line); n++) {
        unsigned maj = 0, min = 0;
        auto sep = line.find(" - ");
        if (sep == std::string::npos || sscanf(line.c_str(), "%*u %*u %u:%u", &maj, &min) != 2) continue;
        if (line.compare(sep + 3, 4, "fuse") == 0) out.push_back(makedev(maj, min));
    }
    return out;
}

Result<TargetFile> open_mapped_file(pid_t pid, const Mapping& m, uint64_t max_bytes) {
    TargetFile f;
    f.deleted = m.deleted();
    f.name = f.deleted ? m.path.substr(0, m.path.size() - 10) : m.path;
    f.dev = makedev(m.dev_major, m.dev_minor);
    f.inode = m.inode;
    if (m.inode == 0 || m.path.empty() || m.path[0] != '/') return Fail{"not a file"};
    if (on_fuse(pid, f.dev)) return Fail{"on a FUSE file system (its server could stall every read)"};

    // 1. The mapping's own file, else the path in the target's root (not a deleted one: that
    // name is only a hint, and whatever is there now is not the mapped file).
    UniqueFd path_fd(
        ::open(fmt::format("/proc/{}/map_files/{:x}-{:x}", pid, m.start, m.end).c_str(), O_PATH | O_CLOEXEC));
    if (!path_fd && (errno == EPERM || errno == EACCES)) {
        if (f.deleted) return Fail{"deleted while mapped; reading it needs CAP_SYS_ADMIN"};
        path_fd = open_in_root(pid, m.path);
    }
    if (!path_fd) return Fail{fmt::format("cannot open: {}", std::strerror(errno))};

    // 2. What it is, before anything reads it.
    auto check = [&](int fd) -> std::string {
        struct stat st;
        if (fstat(fd, &st) != 0) return fmt::format("cannot stat: {}", std::strerror(errno));
        if (!S_ISREG(st.st_mode)) return "not a regular file";
        if (st.st_dev != f.dev || st.st_ino != f.inode) return "not the file that is mapped (replaced since)";
        if (static_cast<uint64_t>(st.st_size) > max_bytes)
            return fmt::format("{} MiB, more than the {} MiB read of a target's file", st.st_size >> 20,
                               max_bytes >> 20);
        f.size = static_cast<uint64_t>(st.st_size);
        return "";
    };
    if (auto why = check(path_fd.get()); !why.empty()) return Fail{why};

    // 3. Readable, through our own descriptor: the same inode, whatever the target does now.
    f.fd.reset(
        ::open(fmt::format("/proc/self/fd/{}", path_fd.get()).c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
    if (!f.fd) return Fail{fmt::format("cannot open: {}", std::strerror(errno))};
    if (auto why = check(f.fd.get()); !why.empty()) return Fail{why};
    return f;
}

std::optional<std::vector<char>> TargetFile::read(uint64_t offset, size_t len) const {
    if (offset >= size) return std::vector<char>{};
    std::vector<char> buf(std::min<uint64_t>(len, size - offset));
    size_t got = 0;
    while (got < buf.size()) {
        ssize_t n = ::pread(fd.get(), buf.data() + got, buf.size() - got, static_cast<off_t>(offset + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return std::nullopt;
        if (n == 0) break;  // truncated since the check
        got += static_cast<size_t>(n);
    }
    buf.resize(got);
    return buf;
}

std::optional<Mapping> exe_mapping(pid_t pid, const std::vector<Mapping>& maps) {
    // The inode the process was started from, without opening it; DONT_SYNC: a FUSE file's
    // attributes come from the cache, not from its server.
    const std::string exe = fmt::format("/proc/{}/exe", pid);
    struct statx stx {};
    if (statx(AT_FDCWD, exe.c_str(), AT_STATX_DONT_SYNC, STATX_INO, &stx) == 0)
        for (const auto& m : maps)
            if (m.offset == 0 && m.inode == stx.stx_ino && m.dev_major == stx.stx_dev_major &&
                m.dev_minor == stx.stx_dev_minor)
                return m;
    // Overlay files on kernels before 6.8 show the layer's inode in maps: then by the name. Only
    // the choice of mapping rests on it; open_mapped_file() checks the inode the mapping maps.
    char buf[4096];
    ssize_t n = readlink(exe.c_str(), buf, sizeof buf);
    if (n <= 0 || n == static_cast<ssize_t>(sizeof buf)) return std::nullopt;
    const std::string path(buf, static_cast<size_t>(n));
    for (const auto& m : maps)
        if (m.offset == 0 && (m.path == path || m.path == path + " (deleted)")) return m;
    return std::nullopt;
}

}  // namespace bb
