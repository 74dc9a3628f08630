#include <gtest/gtest.h>

#include "profile/sched_states.hpp"

namespace {

using namespace bb;

// Two schedulers for 1 s at 1 ms a sample: 2,000 samples would be all their time.
TEST(SchedStates, SharesOfWallTimeWithSleepTheRest) {
    SchedStates s;
    s.add(SchedState::emulator, 500);
    s.add(SchedState::port, 100);
    s.add(SchedState::sleep, 40);  // on the CPU going to sleep: part of sleep's rest
    const auto shares = s.shares(1'000'000, 1'000'000'000, 2);
    EXPECT_DOUBLE_EQ(shares[static_cast<size_t>(SchedState::emulator)], 0.25);
    EXPECT_DOUBLE_EQ(shares[static_cast<size_t>(SchedState::port)], 0.05);
    EXPECT_DOUBLE_EQ(shares[static_cast<size_t>(SchedState::gc)], 0.0);
    EXPECT_DOUBLE_EQ(shares[static_cast<size_t>(SchedState::sleep)], 0.7);
    EXPECT_EQ(s.total(), 640u);
    EXPECT_EQ(SchedStates::text(shares),
              "emulator 25.0%, gc 0.0%, port 5.0%, check_io 0.0%, aux 0.0%, other 0.0%, sleep 70.0%");
}

TEST(SchedStates, MoreSamplesThanWallTimeLeaveNoSleepAndNoTimeNoShares) {
    SchedStates s;
    s.add(SchedState::emulator, 2100);
    EXPECT_DOUBLE_EQ(s.shares(1'000'000, 1'000'000'000, 2)[static_cast<size_t>(SchedState::sleep)], 0.0);
    for (double share : s.shares(1'000'000, 0, 2)) EXPECT_EQ(share, 0.0);
    s.clear();
    EXPECT_EQ(s.total(), 0u);
}

}  // namespace
