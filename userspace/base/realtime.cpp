#include "base/realtime.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace bb {

namespace {
// struct sched_attr as sched_setattr(2) takes it (SCHED_ATTR_SIZE_VER0): Debian 12's
// <linux/sched/types.h> also defines sched_param, which <sched.h> has.
struct SchedAttr {
    uint32_t size;
    uint32_t sched_policy;
    uint64_t sched_flags;
    int32_t sched_nice;
    uint32_t sched_priority;
    uint64_t sched_runtime, sched_deadline, sched_period;
};
static_assert(sizeof(SchedAttr) == 48);
}  // namespace

WakeupPriority raise_wakeup_priority() {
    sched_param sp{};
    sp.sched_priority = 1;
    if (pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp) == 0) return WakeupPriority::realtime;
    // sched_setattr() has no glibc wrapper in Debian 12; pid 0 is the calling thread.
    for (int nice : {-20, 0}) {
        SchedAttr a{};
        a.size = sizeof a;
        a.sched_policy = SCHED_OTHER;
        a.sched_nice = nice;
        a.sched_runtime = 100'000;  // ns: the kernel's shortest slice
        if (syscall(SYS_sched_setattr, 0, &a, 0) != 0) continue;
        // A kernel before 6.12 takes the call and ignores the slice: it reads back as 0.
        SchedAttr now{};
        if (syscall(SYS_sched_getattr, 0, &now, sizeof now, 0) == 0 && now.sched_runtime == a.sched_runtime)
            return WakeupPriority::short_slice;
        return nice < 0 ? WakeupPriority::nice : WakeupPriority::normal;
    }
    return WakeupPriority::normal;
}

const char* wakeup_priority_name(WakeupPriority p) {
    switch (p) {
    case WakeupPriority::realtime: return "realtime";
    case WakeupPriority::short_slice: return "short_slice";
    case WakeupPriority::nice: return "nice";
    case WakeupPriority::normal: break;
    }
    return "normal";
}

}  // namespace bb
