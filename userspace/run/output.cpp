#include "run/output.hpp"

#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>

namespace bb {

uint64_t unix_now_ns() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

Output::Output(const CommonOptions& o) : pattern_(o.output), formats_(o.formats) {
    if (pattern_.empty() || pattern_ == "-") return;
    if (o.every == 0) {
        open(unix_now_ns());
        return;
    }
    // The files come later: check now that they can be made there.
    auto slash = pattern_.rfind('/');
    std::string dir = slash == std::string::npos ? "." : pattern_.substr(0, slash + 1);
    if (access(dir.c_str(), W_OK) != 0) throw UserError(fmt::format("cannot write in {}: {}", dir, std::strerror(errno)));
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
    files_.clear();
    paths_.clear();
    for (Format f : formats_) {
        paths_.push_back(formats_.size() > 1 ? base + file_suffix(f) : base);
        files_.push_back(std::make_unique<std::ofstream>(paths_.back(), std::ios::binary));
        if (!*files_.back()) throw UserError(fmt::format("cannot write {}: {}", paths_.back(), std::strerror(errno)));
    }
}

bool Output::has(Format f) const { return std::find(formats_.begin(), formats_.end(), f) != formats_.end(); }

std::ostream& Output::stream(Format f) {
    if (files_.empty()) return std::cout;
    return *files_.at(std::find(formats_.begin(), formats_.end(), f) - formats_.begin());
}

}  // namespace bb
