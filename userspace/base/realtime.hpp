// Threads whose wakeups must not wait behind the VM's schedulers (-e alloc's armers, the
// scheduler utilization samplers): woken at a busy CPU, a thread of the fair class waits until
// the running one's slice ends (Linux's EEVDF runs it to parity), and a sampler that waits
// reads a scheduler that has meanwhile gone idle: on 2 CPUs that two busy schedulers fill,
// 2 to 5 points low at 10% load.
//   - realtime:    SCHED_FIFO 1; preempts any fair thread at once.
//   - short_slice: where real time is refused: without CAP_SYS_NICE, or as root in a cpu
//                  cgroup that has no real-time runtime (cgroup v1 with RT group scheduling:
//                  a child group's cpu.rt_runtime_us is 0, as in containers whose runtime
//                  gives it none). The fair class at nice -20 where allowed, with the shortest
//                  slice the kernel takes (0.1 ms, sched_attr.sched_runtime, Linux 6.12 on): a
//                  waking thread whose slice is shorter preempts the running one. As close to
//                  the VM's counts as real time, on 2 CPUs the schedulers fill
//                  (SchedUtilFallbackTest).
//   - nice:        the same on a kernel that ignores the slice (before 6.12): nice -20 only.
//   - normal:      none of it was allowed; the thread stays as it was.
#pragma once

namespace bb {

enum class WakeupPriority { realtime, short_slice, nice, normal };

// Raises the calling thread (only it) as far as it may go, and says how far that was.
WakeupPriority raise_wakeup_priority();
// Whether a wakeup of the thread preempts the VM's schedulers at once (real time or the short
// slice): else a sampler may read their busy share a few points low.
inline bool preempts_at_once(WakeupPriority p) {
    return p == WakeupPriority::realtime || p == WakeupPriority::short_slice;
}
// "realtime", "short_slice", "nice", "normal": for --json.
const char* wakeup_priority_name(WakeupPriority p);

}  // namespace bb
