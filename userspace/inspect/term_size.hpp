// What an Erlang term occupies (terms.hpp has how terms are laid out and read), read from
// memory that is not ours: every read goes through TermSource and may fail.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <unordered_set>

#include "inspect/terms.hpp"

namespace bb::term {

// What the term occupies, as erts_debug:flat_size/1 counts it (the words a copy of it would take,
// shared subterms once per reference), and the bytes of the off-heap binaries it refers to.
struct Size {
    uint64_t words = 0;
    uint64_t off_heap_bytes = 0;
};
// nullopt when a read fails, the term is malformed, or it has more than `max_cells` cells (a
// term with much sharing can be far larger flat than on the heap).
std::optional<Size> flat_size(const TermSource& src, uint64_t term, uint64_t max_cells = 20'000'000);

// What the sizes of many terms of one heap (the root set of --inspect) share, so that a term
// reached from many places is walked once: 3,000 dictionary values that are one 100,000-element
// list took 13.5 s sized one by one. Two passes over the roots:
//  - distinct_words(): each term cell once over all calls (`first_visit`, the caller's visited
//    set, says which cells are new); the words of cells no earlier call reached, as
//    erts_debug:size/1 counts a term. Cells met again go to `shared`.
//  - flat_size(): as above, but the size of a `shared` cell is computed once and remembered,
//    and a shared cell met again inside itself (a loop: only corrupt memory has one) is
//    malformed rather than endless.
// Every read of both counts against `reads_left`; past it, nullopt.
struct SizeMemo {
    std::function<bool(uint64_t cell)> first_visit;  // true the first time a cell (a term word) is given
    int64_t reads_left = 100'000'000;
    size_t max_remembered = 4'000'000;  // shared cells remembered at most (memory: ~64 bytes each)
    std::unordered_set<uint64_t> shared;
    std::unordered_map<uint64_t, Size> sizes;  // of shared cells, once known
    std::unordered_set<uint64_t> open;         // shared cells being sized
    // Told the bytes [data, data + bytes) of each off-heap binary a walk meets (unset: nothing).
    std::function<void(uint64_t data, uint64_t bytes)> off_heap_data;
};
std::optional<uint64_t> distinct_words(const TermSource& src, uint64_t term, SizeMemo& memo);
std::optional<Size> flat_size(const TermSource& src, uint64_t term, SizeMemo& memo);

}  // namespace bb::term
