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
std::vector<TopRow> top_rows(const Profile& p, size_t n, bool by_total = false);

// erlang_only: beam-bpf-blame's ranking of the Erlang code on the stacks.
void write_top(const Profile& p, std::ostream& out, size_t n, bool by_total, bool erlang_only = false);
// "root;...;leaf count" lines, sorted by stack text so runs diff cleanly.
void write_folded(const Profile& p, std::ostream& out);

}  // namespace bb
