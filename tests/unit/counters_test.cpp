// The walker's counters' table (sampling/counters.hpp), made from beam_bpf.h's one list: in the
// enum's order, and naming each counter as --stats has always written it (tests and dashboards
// read those keys).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "sampling/counters.hpp"

namespace {

using bb::kCounters;
using bb::StatsGroup;

TEST(CountersTest, TableIsIndexedByTheEnum) {
    for (size_t i = 0; i < kCounters.size(); i++) EXPECT_EQ(kCounters[i].id, i) << kCounters[i].key;
}

TEST(CountersTest, StatsKeysAreTheOnesWrittenBefore) {
    std::set<std::string> keys;
    for (const auto& k : kCounters) {
        if (k.group == StatsGroup::none) continue;
        const std::string key = k.group == StatsGroup::top ? k.key : std::string(k.group_key) + "." + k.key;
        EXPECT_TRUE(keys.insert(key).second) << key << " twice";
        EXPECT_NE(std::string(k.help), "") << key;
    }
    EXPECT_EQ(keys, (std::set<std::string>{"seen", "emitted", "dropped", "filtered", "bpf_walk_ns_total", "code_events",
                                           "code_events_lost", "bpf_native_walk_ns_total", "port_tasks",
                                           "unreadable_by_cause.read_fault", "unreadable_by_cause.state",
                                           "unreadable_by_cause.pid_tag", "unreadable_by_cause.heap_order",
                                           "unreadable_by_cause.stack_pointer", "alloc_watch.traps",
                                           "alloc_watch.traps_ignored", "alloc_watch.wait_ns", "alloc_watch.busy"}));
    EXPECT_STREQ(kCounters[BB_C_SEEN].key, "seen");
    EXPECT_STREQ(kCounters[BB_C_WATCH_HITS].key, "traps");
}

}  // namespace
