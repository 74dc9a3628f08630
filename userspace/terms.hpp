// Erlang terms as a 64-bit VM lays them out (erl_term.h: the same tags from OTP 25 to 29), read
// from memory that is not ours: a term on a process heap, in the literal area, in a dictionary.
// Every read goes through TermSource and may fail; nothing here trusts what it reads.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace bb::term {

constexpr uint64_t kNil = 0x3b;
inline bool is_atom(uint64_t t) { return (t & 0x3f) == 0x0b; }
inline bool is_small(uint64_t t) { return (t & 0xf) == 0xf; }
inline bool is_local_pid(uint64_t t) { return (t & 0xf) == 0x3; }
inline bool is_list(uint64_t t) { return (t & 3) == 1; }   // a pointer to a cons cell, + 1
inline bool is_boxed(uint64_t t) { return (t & 3) == 2; }  // a pointer to a header word, + 2
inline int64_t small_value(uint64_t t) { return static_cast<int64_t>(t) >> 4; }
inline uint64_t atom_index(uint64_t t) { return t >> 6; }
inline uint64_t tuple_header(uint64_t arity) { return arity << 6; }  // ARITYVAL_SUBTAG is 0

// Where terms are read from, and how the VM names what the printer cannot work out itself.
struct TermSource {
    std::function<bool(uint64_t addr, std::span<std::byte> dst)> read;  // all or nothing
    std::function<std::optional<std::string>(uint64_t atom)> atom_text;
    std::function<std::string(uint64_t pid)> pid_text;
    // OTP 27 on: binaries on the heap are ErlHeapBits (subtag 0x8, size in bits); before,
    // ErlHeapBin (subtag 0x9, size in bytes).
    bool heap_bits = false;
};

// An atom as Erlang prints it: bare (init, gen_server) or quoted ('Elixir.Foo', '$ancestors').
std::string printed_atom(std::string_view text);

// A term as Erlang prints it: atoms, integers, pids, tuples, lists, strings and heap binaries;
// anything else as "...". At most `max_chars` characters (then "..."), at most 256 reads and 6
// levels deep; nullopt when a read fails or the term is malformed.
std::optional<std::string> text(const TermSource& src, uint64_t term, size_t max_chars = 80);

}  // namespace bb::term
