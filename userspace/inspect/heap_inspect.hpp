// The heap inspector of beam-bpf-procs --inspect: one process's memory copied from outside while
// it is not running (its young and old heaps, heap fragments, stack, dictionary and message
// queue), and the terms of its root set read from that copy. Nothing is stopped or written.
//
// The copy is only believed if the process did not run while it was taken: its state says it is
// not running or collecting before, and its heap pointers, reductions and queues are unchanged
// after. Terms are then read from the copy, every pointer checked against the areas copied; a
// pointer elsewhere is followed only into the VM's literal area (read live: literals do not
// change), and off-heap binaries' bytes are read live, bounded.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "inspect/process_table.hpp"
#include "inspect/terms.hpp"
#include "target/vm.hpp"

namespace bb {

struct HeapSnapshot {
    ProcessEntry proc;  // as read before the copy (unchanged after it)
    uint64_t stop = 0, hend = 0;
    std::vector<uint64_t> stack;                                // words [stop, hend)
    std::vector<std::pair<uint64_t, uint64_t>> dictionary;      // key, value
    std::vector<uint64_t> messages;                             // each message's term, oldest first
    size_t undecoded_messages = 0;  // distribution messages not yet decoded: no term to show
    size_t attempts = 0;            // copies taken until one held still
    struct Area {
        uint64_t addr;
        std::vector<std::byte> bytes;
    };
    std::vector<Area> areas;  // heaps, fragments, stack; sorted by address, disjoint
    uint64_t bytes_copied() const;

    // Reads [addr, addr + dst.size()) from one area; false when no area holds all of it.
    bool read(uint64_t addr, std::span<std::byte> dst) const;
};

// Copies the process at `c_p` (which must still be `pid`). UserError when it is gone, or it kept
// running through every attempt ("busy, try again"), or its heap is larger than `max_bytes`.
HeapSnapshot snapshot_process(const Vm& vm, uint64_t c_p, uint64_t pid, uint64_t max_bytes);

// A TermSource over the snapshot: the copy, then the literal area and off-heap binaries live.
term::TermSource snapshot_terms(const Vm& vm, const HeapSnapshot& s, term::TermSource base);

// One term of the root set and what it holds.
struct Root {
    enum class Kind { Stack, Dictionary, Message } kind;
    std::string where;     // "y3", "#12" (the 12th message); for the dictionary, see `key`
    std::string function;  // for a stack slot: the function whose frame holds it
    uint64_t term = 0;
    uint64_t key = 0;  // a dictionary entry's key
    std::optional<term::Size> size;  // nullopt: could not be sized (bad, or too shared)
    std::optional<std::string> text;  // nullopt: did not decode
};
const char* kind_name(Root::Kind k);

// The root set of the snapshot: Y registers (frame by frame, catches and frame pointers left
// out), dictionary entries, messages. `function_at` names a return address (or "" if none).
std::vector<Root> root_set(const HeapSnapshot& s, const std::string& current_function,
                           const std::function<std::string(uint64_t)>& function_at);

}  // namespace bb
