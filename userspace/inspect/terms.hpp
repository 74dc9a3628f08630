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

#include "target/release.hpp"

namespace bb::term {

constexpr uint64_t kNil = 0x3b;
inline bool is_atom(uint64_t t) { return (t & 0x3f) == 0x0b; }
inline bool is_small(uint64_t t) { return (t & 0xf) == 0xf; }
inline bool is_local_pid(uint64_t t) { return (t & 0xf) == 0x3; }
inline bool is_local_port(uint64_t t) { return (t & 0xf) == 0x7; }
inline bool is_catch(uint64_t t) { return (t & 0x3f) == 0x1b; }  // a catch tag, only on stacks
inline bool is_list(uint64_t t) { return (t & 3) == 1; }         // a pointer to a cons cell, + 1
inline bool is_boxed(uint64_t t) { return (t & 3) == 2; }        // a pointer to a header word, + 2
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

}  // namespace bb::term
