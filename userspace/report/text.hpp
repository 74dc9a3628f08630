// The text reports: the top table and folded stacks (flamegraph.pl's input).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "profile/profile.hpp"

namespace bb {

struct TopRow {
    std::string label;
    FrameKind kind;
    uint64_t self = 0;   // samples with this frame as the leaf
    uint64_t total = 0;  // samples with this frame anywhere on the stack, once per sample
};
// Frames merged by Profile::label, sorted by self then total (by_total: the other way round,
// "which code is on the stack" for beam-bpf-blame), then label; at most `n` rows (0: all).
// erlang_first: a sample's self goes to its innermost Erlang function (the C code it called is
// its doing), else its innermost VM frame, else its leaf.
std::vector<TopRow> top_rows(const Profile& p, size_t n, bool by_total = false, bool erlang_first = false);

struct TopOptions;
// Native rows under the Erlang-first table.
inline constexpr size_t kNativeRows = 5;
// The top table: Erlang first (native time charged to the Erlang function that called it, the
// hottest native code in a section below), or flat (--flat: every frame by its own time); with
// erlang_only, beam-bpf-blame's ranking of the Erlang code on the stacks.
void write_top(const Profile& p, std::ostream& out, const TopOptions& o);
// "root;...;leaf count" lines, sorted by stack text so runs diff cleanly.
void write_folded(const Profile& p, std::ostream& out);

}  // namespace bb
