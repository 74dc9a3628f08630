// The one clock of beam-bpf: CLOCK_MONOTONIC in ns, the clock the walker's bpf_ktime_get_ns()
// reads, so record times, refresh times and code-event instants compare directly.
#pragma once
#include <time.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace bb {

inline uint64_t monotonic_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

// How long each step of something took, in the order they ran: attaching to a VM, for -v and
// --stats (what a slow attach spent its time on).
class StageTimes {
public:
    // The step that ended now, since the previous one ended (or this was made).
    void mark(std::string step) {
        const uint64_t now = monotonic_ns();
        ms_.emplace_back(std::move(step), static_cast<double>(now - since_) / 1e6);
        since_ = now;
    }
    void append(const StageTimes& other) {
        ms_.insert(ms_.end(), other.ms_.begin(), other.ms_.end());
        since_ = monotonic_ns();
    }
    const std::vector<std::pair<std::string, double>>& ms() const { return ms_; }

private:
    uint64_t since_ = monotonic_ns();
    std::vector<std::pair<std::string, double>> ms_;
};

}  // namespace bb
