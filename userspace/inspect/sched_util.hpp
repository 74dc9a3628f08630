// Scheduler utilization from outside: each scheduler's busy share over an interval, as the VM
// itself counts it for erlang:statistics(scheduler_wall_time). Busy-waiting for work
// ("spinning") is not busy, there as here: the VM marks a scheduler idle before it spins.
//   - A normal scheduler's busy state is its ErtsSchedulerData's thr_progress_data.active,
//     which the VM sets and clears with every change of scheduler_wall_time's busy state
//     (erl_process.c, scheduler_wait(), OTP 25 to 29). Its own counters are kept only while
//     the flag is on, so the state is sampled: about 1,000 times a second at jittered instants
//     (a load periodic in time cannot alias with the samples), each a read of 4 bytes.
//   - A dirty scheduler's counters (sched_wall_time: working.total and working.start) are
//     always kept: they are read at both ends of the interval, exactly, under their sequence
//     number as the VM's own reader reads them (read_dirty_sched_wall_time()).
// No BPF, nothing written to the VM, no flag turned on.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "target/vm.hpp"

namespace bb {

// A copy of a scheduler's sched_wall_time (ErtsSchedWallTime), as the VM keeps it.
struct WallTimeCopy {
    uint32_t mod = 0;  // sequence number: odd while the VM writes (dirty schedulers)
    int32_t enabled = 0;
    uint64_t start = 0;          // CLOCK_MONOTONIC ns when counting started
    uint64_t working_total = 0;  // busy ns, up to the current busy period
    uint64_t working_start = 0;  // the current busy period's start, relative to start; ~0 when idle
};
// Busy ns of a dirty scheduler from its counting start up to `now_ns` (CLOCK_MONOTONIC), as
// read_dirty_sched_wall_time() computes it. Pure.
uint64_t dirty_busy_ns(const WallTimeCopy& c, uint64_t now_ns);

struct SchedBusy {
    uint8_t type = 0;  // BB_SCHED_NORMAL, BB_SCHED_DIRTY_CPU, BB_SCHED_DIRTY_IO
    uint16_t no = 0;
    double busy = 0;       // share of the interval, 0 to 1
    uint64_t samples = 0;  // normal schedulers: samples of its state (0: exact, from the counters)
};

class SchedUtil {
public:
    // The VM's schedulers, from its threads (Vm::sched_threads()).
    explicit SchedUtil(const Vm& vm);
    // Watches for `seconds` (or until `stop` says so) and returns each scheduler's busy share,
    // normal ones first, by number. A scheduler whose memory stops reading is left out.
    std::vector<SchedBusy> watch(double seconds, const std::function<bool()>& stop = {});
    // "normal 1 45%  2 51% | dirty cpu 1 0%  2 0% | dirty io 0% (10)": one line.
    static std::string line(const std::vector<SchedBusy>& s);

private:
    std::optional<WallTimeCopy> wall_time(uint64_t esdp) const;
    const Vm& vm_;
    std::vector<SchedThread> scheds_;
};

}  // namespace bb
