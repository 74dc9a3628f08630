// The one clock of beam-bpf: CLOCK_MONOTONIC in ns, the clock the walker's bpf_ktime_get_ns()
// reads, so record times, refresh times and code-event instants compare directly.
#pragma once
#include <time.h>

#include <cstdint>

namespace bb {

inline uint64_t monotonic_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

}  // namespace bb
