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
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/realtime.hpp"
#include "target/remote_memory.hpp"
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

// [{"type": "normal"|"dirty_cpu"|"dirty_io", "no", "busy", "samples"}]: procs --watch --json and
// the agent's --stats.
nlohmann::json sched_json(const std::vector<SchedBusy>& s);

// One VM's schedulers, watched. sample() and take() may run on different threads (the agent's
// sampler thread samples while its main thread takes): they hold a lock, and the memory reads are
// system calls with no state.
class SchedUtil {
public:
    // The VM's schedulers, from its threads (Vm::sched_threads()). Nothing of `vm` is kept.
    explicit SchedUtil(const Vm& vm);
    // Reads each normal scheduler's busy state once: one sample of each.
    void sample();
    // Each scheduler's busy share since the last take() (or the construction), normal ones first,
    // by number; then starts the next interval. A scheduler whose memory stops reading is left out.
    std::vector<SchedBusy> take();
    // Samples for `seconds` (or until `stop` says so) on a thread of its own raised as far as it
    // may be (base/realtime.hpp: at normal priority, on a host whose CPUs the busy schedulers
    // fill, the sampler's wakeups waited for a scheduler to go idle and read it idle, 2 to 5
    // points low at 10% load on 2 CPUs), 1,000 times a second
    // (1,000 samples a second: 1.6 points at 3 sd in 1 s at 50% busy, under 1 in 4 s), then
    // takes. `stop` is called on that thread.
    std::vector<SchedBusy> watch(double seconds, const std::function<bool()>& stop = {});
    // What the last watch()'s sampler got (realtime before the first).
    WakeupPriority sampler_priority() const { return priority_; }
    // "normal 1 45%  2 51% | dirty cpu 1 0%  2 0% | dirty io 0% (10)": one line.
    static std::string line(const std::vector<SchedBusy>& s);
    // The time to the next of `hz` samples a second at jittered instants: uniform in 0.5 to 1.5
    // of 1/hz, so that no load periodic in time aliases with them.
    static uint64_t next_gap_ns(std::mt19937_64& rng, int hz);

private:
    struct Watched {
        uint8_t type = 0;
        uint16_t no = 0;
        uint64_t esdp = 0;
        uint64_t busy = 0, samples = 0;  // normal schedulers, this interval
        uint64_t dirty_from = 0;         // dirty ones: their busy ns at the interval's start
        bool ok = true;
    };
    std::optional<WallTimeCopy> wall_time(uint64_t esdp) const;
    void start_interval();  // under mu_

    RemoteMemory mem_;
    uint32_t esd_active_, esd_swt_mod_, esd_swt_enabled_, esd_swt_start_, esd_swt_total_, esd_swt_working_;
    std::mutex mu_;
    std::vector<Watched> w_;
    uint64_t t0_ = 0;
    WakeupPriority priority_ = WakeupPriority::realtime;
};

}  // namespace bb
