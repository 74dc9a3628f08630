// A dirty scheduler's busy time from a copy of its counters, as the VM's own reader computes it
// (read_dirty_sched_wall_time(), erl_process.c).
#include <gtest/gtest.h>

#include "inspect/sched_util.hpp"

namespace bb {
namespace {

TEST(DirtyBusy, IdleSchedulerIsItsTotal) {
    WallTimeCopy c;
    c.start = 1'000;
    c.working_total = 700;
    c.working_start = ~uint64_t{0};  // ERTS_SCHED_WTIME_IDLE
    EXPECT_EQ(dirty_busy_ns(c, 5'000), 700u);
}

TEST(DirtyBusy, BusySchedulerAddsItsCurrentPeriod) {
    WallTimeCopy c;
    c.start = 1'000;
    c.working_total = 700;
    c.working_start = 3'000;  // relative to start: busy since 4,000
    EXPECT_EQ(dirty_busy_ns(c, 5'000), 1'700u);
    // A period that has not begun by `now` (a copy read after it) adds nothing: never a wrap.
    EXPECT_EQ(dirty_busy_ns(c, 3'500), 700u);
    EXPECT_EQ(dirty_busy_ns(c, 500), 700u);
}

}  // namespace
}  // namespace bb
