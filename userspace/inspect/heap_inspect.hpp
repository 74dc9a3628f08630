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
#include "inspect/term_size.hpp"
#include "inspect/terms.hpp"
#include "target/vm.hpp"

namespace bb {

struct HeapSnapshot {
    ProcessEntry proc;  // as read before the copy (unchanged after it)
    uint64_t stop = 0, hend = 0;
    std::vector<uint64_t> stack;                            // words [stop, hend)
    std::vector<std::pair<uint64_t, uint64_t>> dictionary;  // key, value
    std::vector<uint64_t> messages;                         // each message's term, oldest first
    size_t undecoded_messages = 0;                          // distribution messages not yet decoded: no term to show
    size_t attempts = 0;                                    // copies taken until one held still
    struct Area {
        uint64_t addr;
        std::vector<std::byte> bytes;
    };
    std::vector<Area> areas;  // heaps, fragments, stack; sorted by address, disjoint
    // The bytes of the off-heap binaries the roots reach (as much of each as is printed), read
    // with the heap; sorted by address, disjoint.
    std::vector<Area> binaries;
    uint64_t bytes_copied() const;

    // Reads [addr, addr + dst.size()) from one area; false when no area holds all of it.
    bool read(uint64_t addr, std::span<std::byte> dst) const;
    // The same from the binaries' bytes.
    bool read_binary(uint64_t addr, std::span<std::byte> dst) const;
};

// Copies the process at `c_p` (which must still be `pid`), with the first `binary_prefix` bytes
// of each off-heap binary its roots reach (walked with `terms`, a TermSource for this VM).
// UserError when it is gone, or it kept running through every attempt ("busy, try again"), or
// the copy would be larger than `max_bytes`.
HeapSnapshot snapshot_process(const Vm& vm, uint64_t c_p, uint64_t pid, uint64_t max_bytes,
                              const term::TermSource& terms, uint64_t binary_prefix);

// The dictionary's {Key, Value} pairs from its hash table's slots (each a {Key, Value} tuple or
// a list of them), into s.dictionary. A bucket whose tail leads back into it ends there.
void dictionary_pairs(HeapSnapshot& s, const std::vector<uint64_t>& slots);

// A TermSource over the snapshot: the copy (binaries' bytes too), then the literal area live.
term::TermSource snapshot_terms(const Vm& vm, const HeapSnapshot& s, term::TermSource base);

// One term of the root set and what it holds.
struct Root {
    enum class Kind { Stack, Dictionary, Message } kind;
    std::string where;     // "y3", "#12" (the 12th message); for the dictionary, see `key`
    std::string function;  // for a stack slot: the function whose frame holds it
    uint64_t term = 0;
    uint64_t key = 0;                 // a dictionary entry's key
    std::optional<term::Size> size;   // nullopt: could not be sized (bad, or the budget spent)
    uint64_t distinct_words = 0;      // words of its term no root before it reaches (size_roots)
    std::optional<std::string> text;  // nullopt: did not decode
    // Other roots holding the very same term (one pointer), folded into this one by fold_shared.
    struct Sharer {
        Kind kind;
        std::string where, function;
        uint64_t key = 0;
    };
    size_t sharers = 0;
    std::vector<Sharer> first_sharers;  // the first few of them, to name
};
const char* kind_name(Root::Kind k);

// The root set of the snapshot: Y registers (frame by frame, catches and frame pointers left
// out), dictionary entries, messages. `function_at` names a return address (or "" if none).
std::vector<Root> root_set(const HeapSnapshot& s, const std::string& current_function,
                           const std::function<std::string(uint64_t)>& function_at);

// What the inspector may spend on sizing the roots of one process: reads of the copy and time.
// A heap whose terms are shared many times over, or corrupt (a loop), must not make it run for
// minutes: past either, the roots not yet sized show no size and the result says it is partial.
struct InspectBudget {
    int64_t max_reads = 50'000'000;  // about 1.5 s of reads from the copy on this machine
    uint64_t max_ns = 10'000'000'000;
};
struct RootSizes {
    // Per kind (Root::Kind): the words its roots reach that no earlier root reached (each heap
    // word once: what the roots hold together, as erts_debug:size/1 counts a term).
    uint64_t distinct_words[3] = {0, 0, 0};
    std::string partial;  // why some roots were not sized ("" when all were)
};
// Sizes every root (Root::size, flat as erts_debug:flat_size/1 counts it; Root::distinct_words),
// walking each heap cell once over all roots: a term shared by many roots is sized once.
RootSizes size_roots(const HeapSnapshot& s, const term::TermSource& terms, std::vector<Root>& roots,
                     const InspectBudget& budget = {});

// Roots that hold the very same boxed term or list (one pointer: 3,000 dictionary values that are
// one list) folded into the first of them (their Root::sharers), so that it is shown once.
// `roots` in the order to show; the order is kept.
std::vector<Root> fold_shared(std::vector<Root> roots, size_t names_kept = 3);

}  // namespace bb
