#include "profile/kinds.hpp"

namespace bb {

namespace {

// In the order the agent lists its -e words.
constexpr ProfileKind kKinds[] = {
    // CPU samples (cpu-clock, cycles; blame's samples): a sample stands for 1/F s of CPU.
    {.unit = "samples",
     .agent_name = "cpu",
     .sample_type = "samples",
     .period_type = "cpu",
     .pyroscope_type = "cpu",
     .pyroscope_units = "samples"},
    // beam-bpf-sample -e alloc, -e alloc-gc: words allocated on process heaps; bytes in pprof, as
    // Go's heap profiles (alloc_space).
    {.unit = "words",
     .agent_name = "alloc",
     .sample_type = "alloc_words",
     .words = true,
     .title = ", words allocated",
     .pyroscope_type = "alloc_space",
     .pyroscope_units = "bytes"},
    // -e wall: nanoseconds of process time (go tool pprof shows them as durations, as Go's own
    // "wall" profiles).
    {.unit = "wall",
     .agent_name = "wall",
     .sample_type = "wall",
     .timed = true,
     .process_time = true,
     .time_of = "of process time",
     .seconds = "process-seconds",
     .title = ", wall clock of every process",
     .pyroscope_type = "wall",
     .pyroscope_units = "samples"},
    // -e offcpu: nanoseconds a VM thread blocked.
    {.unit = "offcpu",
     .agent_name = "offcpu",
     .sample_type = "offcpu",
     .timed = true,
     .time_of = "blocked",
     .seconds = "thread-seconds blocked",
     .title = ", time its threads blocked",
     .pyroscope_type = "offcpu",
     .pyroscope_units = "samples"},
    // beam-bpf-blame --count: calls of the watched functions.
    {.unit = "calls", .sample_type = "calls"},
};

}  // namespace

std::span<const ProfileKind> profile_kinds() { return kKinds; }

const ProfileKind& kind_of(std::string_view unit) {
    for (const ProfileKind& k : kKinds)
        if (k.unit == unit) return k;
    return kKinds[0];
}

const ProfileKind* agent_kind(std::string_view name) {
    for (const ProfileKind& k : kKinds)
        if (!name.empty() && k.agent_name == name) return &k;
    return nullptr;
}

}  // namespace bb
