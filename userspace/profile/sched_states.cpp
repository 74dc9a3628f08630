#include "profile/sched_states.hpp"

#include <fmt/format.h>

namespace bb {

uint64_t SchedStates::total() const {
    uint64_t n = 0;
    for (uint64_t s : samples_) n += s;
    return n;
}

std::array<double, kSchedStates> SchedStates::shares(uint64_t ns_per_sample, uint64_t wall_ns,
                                                     size_t schedulers) const {
    std::array<double, kSchedStates> out{};
    const double all = static_cast<double>(wall_ns) * static_cast<double>(schedulers);
    if (all <= 0) return out;
    double busy = 0;
    for (size_t i = 0; i < kSchedStates; i++) {
        if (static_cast<SchedState>(i) == SchedState::sleep) continue;
        out[i] = static_cast<double>(samples_[i]) * static_cast<double>(ns_per_sample) / all;
        busy += out[i];
    }
    // More samples than wall time (a clock's rounding, a throttled timer's catch-up): no sleep.
    out[static_cast<size_t>(SchedState::sleep)] = busy < 1 ? 1 - busy : 0;
    return out;
}

std::string SchedStates::text(const std::array<double, kSchedStates>& shares) {
    std::string out;
    for (size_t i = 0; i < kSchedStates; i++)
        out += fmt::format("{}{} {:.1f}%", i ? ", " : "", kSchedStateNames[i], 100 * shares[i]);
    return out;
}

}  // namespace bb
