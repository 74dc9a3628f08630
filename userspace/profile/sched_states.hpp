// The normal schedulers' time split as msacc splits it (erts_msacc.h's default states), from CPU
// samples: each sample of a normal scheduler is one state's, and sleep is the rest of their wall
// time (off the CPU, or on it going to sleep). What `msacc:start/1` counts inside the VM, without
// turning it on.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace bb {

enum class SchedState : uint8_t { emulator, gc, port, check_io, aux, other, sleep };
inline constexpr size_t kSchedStates = 7;
inline constexpr std::array<std::string_view, kSchedStates> kSchedStateNames = {"emulator", "gc",    "port", "check_io",
                                                                                "aux",      "other", "sleep"};

class SchedStates {
public:
    void add(SchedState s, uint64_t samples = 1) { samples_[static_cast<size_t>(s)] += samples; }
    uint64_t total() const;
    // Each state's share of `schedulers` threads' `wall_ns`, a sample standing for
    // `ns_per_sample` of CPU time; sleep the rest (the samples of sleep included). All 0 when
    // there is no wall time to share.
    std::array<double, kSchedStates> shares(uint64_t ns_per_sample, uint64_t wall_ns, size_t schedulers) const;
    // "emulator 22.6%, gc 1.6%, ..., sleep 67.9%", in msacc's order of the states above.
    static std::string text(const std::array<double, kSchedStates>& shares);
    void clear() { samples_ = {}; }

private:
    std::array<uint64_t, kSchedStates> samples_{};
};

}  // namespace bb
