// The calling thread at real-time priority (SCHED_FIFO 1), where the process may have it:
// for threads whose wakeups must not wait behind the VM's schedulers (-e alloc's armers, the
// scheduler utilization samplers). Without the privilege the thread stays as it was.
#pragma once
#include <pthread.h>
#include <sched.h>

namespace bb {

inline void run_at_realtime_priority() {
    sched_param sp{};
    sp.sched_priority = 1;
    pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
}

}  // namespace bb
