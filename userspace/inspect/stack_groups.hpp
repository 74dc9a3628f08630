// beam-bpf-procs --stacks's grouping: processes in the same state with the same frames are one
// group, the biggest first (as Go's goroutine?debug=1 groups goroutines). Pure.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace bb {

struct StackKey {
    std::string state;             // the VM's own: waiting, runnable, running, ...
    std::vector<uint32_t> frames;  // frame ids (names the caller interned), leaf first
    bool operator==(const StackKey&) const = default;
};

struct StackGroup {
    StackKey key;
    size_t count = 0;
    std::vector<size_t> first;  // the indexes into the input of its first members (at most `kept`)
};

// The groups of `stacks`, by count (largest first), groups of one count in the order their
// first member came.
std::vector<StackGroup> group_stacks(const std::vector<StackKey>& stacks, size_t kept = 3);

// Runs of one frame (a deep recursion) as (frame, times), leaf first: each is printed as one
// line, "f/1 x479".
std::vector<std::pair<uint32_t, size_t>> frame_runs(const std::vector<uint32_t>& frames);

}  // namespace bb
