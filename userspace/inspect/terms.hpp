// Erlang terms as a 64-bit VM lays them out (erl_term.h), read from memory that is not ours: a
// term on a process heap, in the literal area, in a dictionary. Every read goes through
// TermSource and may fail; nothing here trusts what it reads.
//
// Two layouts: OTP 25 and 26, and OTP 27 on, which reworked binaries (ErlHeapBits, ErlSubBits
// and BinRef instead of ErlHeapBin, ErlSubBin and ProcBin), funs (the environment size in the
// header, a FunRef last in it) and renumbered the header subtags from 8 up.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "target/release.hpp"

namespace bb::term {

constexpr uint64_t kNil = 0x3b;
inline bool is_atom(uint64_t t) { return (t & 0x3f) == 0x0b; }
inline bool is_small(uint64_t t) { return (t & 0xf) == 0xf; }
inline bool is_local_pid(uint64_t t) { return (t & 0xf) == 0x3; }
inline bool is_local_port(uint64_t t) { return (t & 0xf) == 0x7; }
inline bool is_catch(uint64_t t) { return (t & 0x3f) == 0x1b; }  // a catch tag, only on stacks
inline bool is_list(uint64_t t) { return (t & 3) == 1; }   // a pointer to a cons cell, + 1
inline bool is_boxed(uint64_t t) { return (t & 3) == 2; }  // a pointer to a header word, + 2
inline bool is_immediate(uint64_t t) { return (t & 3) == 3; }
inline int64_t small_value(uint64_t t) { return static_cast<int64_t>(t) >> 4; }
inline uint64_t atom_index(uint64_t t) { return t >> 6; }
inline uint64_t tuple_header(uint64_t arity) { return arity << 6; }  // ARITYVAL_SUBTAG is 0

// Where terms are read from, and how the VM names what the printer cannot work out itself.
struct TermSource {
    std::function<bool(uint64_t addr, std::span<std::byte> dst)> read;  // all or nothing
    std::function<std::optional<std::string>(uint64_t atom)> atom_text;
    std::function<std::string(uint64_t pid)> pid_text;
    // The bytes of an off-heap (refc) binary, which live outside any heap; unset: not printed.
    std::function<bool(uint64_t addr, std::span<std::byte> dst)> read_off_heap;
    TermLayout layout = kTerms25;  // the release's (target/release.hpp)
};

// How much of a term to print: like io_lib's ~P, `depth` counts nesting and elements alike
// ([1,2|...] at depth 3; negative: no limit), then at most `max_chars` characters (then "..."),
// and at most `max_reads` words read.
// How terms are written: as Erlang's ~p, or as Elixir's inspect/1 (:ok, "text", %{a: 1},
// [a: 1], ~c"abc", MyApp.Repo, #PID<0.85.0>).
enum class Syntax { erlang, elixir };

struct Limits {
    size_t max_chars = 80;
    int depth = -1;
    int max_reads = 256;
    Syntax syntax = Syntax::erlang;
};

// An atom as Erlang prints it: bare (init, gen_server) or quoted ('Elixir.Foo', '$ancestors').
std::string printed_atom(std::string_view text);
// An atom as Elixir prints it: :ok, :"with space", true, nil, MyApp.Repo (for 'Elixir.MyApp.Repo').
std::string elixir_atom(std::string_view text);

// A term as Erlang's ~p prints it (without line breaks), or as Elixir's inspect/1 does
// (limits.syntax), abbreviated to `limits`; nullopt when a read fails or the term is malformed.
std::optional<std::string> text(const TermSource& src, uint64_t term, const Limits& limits = {});

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
