#include "run/output.hpp"

#include "base/error.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <iostream>

namespace bb {

uint64_t unix_now_ns() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
}

namespace {

std::string dir_of(const std::string& path) {
    auto slash = path.rfind('/');
    return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

// The mode a plain open(O_CREAT, 0666) would give, under this process's umask.
mode_t file_mode() {
    static const mode_t mask = [] {
        mode_t m = umask(0);
        umask(m);
        return m;
    }();
    return 0666 & ~mask;
}

// `bytes` into the character device or FIFO at `path`, opened as what lstat() saw (no link
// followed, no other file): -o /dev/null is written in place.
void write_in_place(const std::string& path, const struct stat& seen, std::string_view bytes) {
    // Non-blocking to open: a FIFO no one reads fails (ENXIO) instead of waiting for ever.
    int fd = ::open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | O_NONBLOCK);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_dev != seen.st_dev || st.st_ino != seen.st_ino ||
        fcntl(fd, F_SETFL, 0) != 0) {
        int err = fd < 0 ? errno : ESTALE;
        if (fd >= 0) ::close(fd);
        throw UserError(fmt::format("cannot write {}: {}", path, std::strerror(err)));
    }
    for (size_t done = 0; done < bytes.size();) {
        ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            int err = errno;
            ::close(fd);
            throw UserError(fmt::format("cannot write {}: {}", path, std::strerror(err)));
        }
        done += static_cast<size_t>(n);
    }
    ::close(fd);
}

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes, FileAccess access) {
    // Renaming over a device node would replace it with a regular file: as root, -o /dev/null
    // (the benches' own) turned the host's /dev/null into a file, and the next OTP configure
    // run on the machine failed. A character device or a FIFO is written in place; any other
    // file that is not a regular one (a block device, a socket) is refused.
    struct stat seen;
    if (lstat(path.c_str(), &seen) == 0 && !S_ISREG(seen.st_mode) && !S_ISLNK(seen.st_mode) && !S_ISDIR(seen.st_mode)) {
        if (!S_ISCHR(seen.st_mode) && !S_ISFIFO(seen.st_mode))
            throw UserError(fmt::format("cannot write {}: not a regular file, a character device or a FIFO", path));
        return write_in_place(path, seen, bytes);
    }
    std::string base = path.substr(path.rfind('/') + 1);
    std::string tmp = dir_of(path) + "/." + base + ".XXXXXX";
    int fd = mkostemp(tmp.data(), O_CLOEXEC);  // O_CREAT | O_EXCL, mode 0600
    if (fd < 0) throw UserError(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
    auto fail = [&](const char* what) {
        int err = errno;
        ::close(fd);
        ::unlink(tmp.c_str());
        throw UserError(fmt::format("cannot write {}: {}: {}", path, what, std::strerror(err)));
    };
    // Before a byte is written: no reader ever sees it with wider rights.
    if (access.group != static_cast<gid_t>(-1) && fchown(fd, static_cast<uid_t>(-1), access.group) != 0) fail("fchown");
    if (fchmod(fd, access.mode ? access.mode : file_mode()) != 0) fail("fchmod");
    for (size_t done = 0; done < bytes.size();) {
        ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) fail("write");
        done += static_cast<size_t>(n);
    }
    if (::close(fd) != 0) {
        fd = -1;
        int err = errno;
        ::unlink(tmp.c_str());
        throw UserError(fmt::format("cannot write {}: {}", path, std::strerror(err)));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        int err = errno;
        ::unlink(tmp.c_str());
        throw UserError(fmt::format("cannot write {}: {}", path, std::strerror(err)));
    }
}

Output::Output(const CommonOptions& o) : pattern_(o.output), formats_(o.formats) {
    if (pattern_.empty() || pattern_ == "-") return;
    // The files come at the end of the run (or of each interval): check now that they can be
    // made there.
    std::string dir = dir_of(pattern_);
    if (access(dir.c_str(), W_OK) != 0)
        throw UserError(fmt::format("cannot write in {}: {}", dir, std::strerror(errno)));
    struct stat st;
    if (pattern_.find("%t") == std::string::npos && formats_.size() == 1 && stat(pattern_.c_str(), &st) == 0 &&
        S_ISDIR(st.st_mode))
        throw UserError(fmt::format("cannot write {}: {}", pattern_, std::strerror(EISDIR)));
    if (o.every == 0) open(unix_now_ns());
}

void Output::open(uint64_t start_unix_ns) {
    if (pattern_.empty() || pattern_ == "-") return;
    time_t t = static_cast<time_t>(start_unix_ns / 1'000'000'000ull);
    tm utc{};
    gmtime_r(&t, &utc);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
    std::string base = pattern_;
    for (size_t at; (at = base.find("%t")) != std::string::npos;) base.replace(at, 2, stamp);
    reports_.clear();
    paths_.clear();
    for (Format f : formats_) {
        paths_.push_back(formats_.size() > 1 ? base + file_suffix(f) : base);
        reports_.push_back(std::make_unique<std::ostringstream>());
    }
}

void Output::commit() {
    for (size_t i = 0; i < reports_.size(); i++) write_file_atomically(paths_[i], reports_[i]->view());
    reports_.clear();
    // A report on stdout is out before the run's summary on stderr: in a terminal, or in one
    // file with 2>&1, the summary otherwise landed inside it.
    std::cout.flush();
    std::fflush(stdout);
}

bool Output::has(Format f) const { return std::find(formats_.begin(), formats_.end(), f) != formats_.end(); }

std::ostream& Output::stream(Format f) {
    if (reports_.empty() && (pattern_.empty() || pattern_ == "-")) return std::cout;
    if (reports_.empty()) throw UserError("no report open to write to");  // a bug: open() first
    return *reports_.at(std::find(formats_.begin(), formats_.end(), f) - formats_.begin());
}

}  // namespace bb
