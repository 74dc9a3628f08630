// The walker's per-VM counters (enum bb_counter) in user space: their values, indexed by the
// enum, and what each is called. Both come from the one list in beam_bpf.h (BB_COUNTERS), so a
// counter added there is summed, named and written to --stats without another edit.
#pragma once
#include <array>
#include <cstdint>

#include "beam_bpf.h"

namespace bb {

// One slot's counters, summed over the CPUs: counters[BB_C_SEEN].
using BpfCounters = std::array<uint64_t, BB_C_NR>;

// Where --stats writes a counter: at its top level, in the object of that name, or nowhere.
enum class StatsGroup { top, unreadable_by_cause, alloc_watch, none };

struct CounterInfo {
    bb_counter id;
    StatsGroup group;
    const char* group_key;  // the object's key in --stats (for a group other than top and none)
    const char* key;        // the counter's key in --stats, or in its group's object
    const char* help;       // what it counts
};

// Indexed by the enum: kCounters[BB_C_SEEN].key is "seen".
inline constexpr std::array<CounterInfo, BB_C_NR> kCounters = {{
#define BB_COUNTER_INFO(id, group, key, help) {BB_C_##id, StatsGroup::group, #group, #key, help},
    BB_COUNTERS(BB_COUNTER_INFO)
#undef BB_COUNTER_INFO
}};

}  // namespace bb
