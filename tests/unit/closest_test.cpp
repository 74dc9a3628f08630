// base/closest.hpp: the "did you mean" of blame's functions and --process names.
#include <gtest/gtest.h>

#include "base/closest.hpp"

namespace {

TEST(ClosestTest, NearestFirstTiesByName) {
    EXPECT_EQ(bb::edit_distance("bb_queu", "bb_queue"), 1u);
    EXPECT_EQ(bb::edit_distance("", "abc"), 3u);
    auto near = bb::closest("bb_queu", {"bb_refc", "bb_queue", "bb_big_heap", "bb_queue", "bb_quux"}, 2);
    ASSERT_EQ(near.size(), 2u);
    EXPECT_EQ(near[0], "bb_queue");
    EXPECT_EQ(near[1], "bb_quux");
    EXPECT_EQ(bb::join({"a", "b"}), "a, b");
    EXPECT_EQ(bb::join({"a", "b", "c"}, ", ", " and "), "a, b and c");
    EXPECT_EQ(bb::join({"a"}, ", ", " and "), "a");
    EXPECT_EQ(bb::join({}, ", ", " and "), "");
    EXPECT_TRUE(bb::closest("x", {}, 3).empty());
}

}  // namespace
