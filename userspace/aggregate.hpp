// Counts of identical stacks, and what the reports derive from them.
#pragma once
#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "symbolizer.hpp"

namespace bb {

class Aggregator {
public:
    // `stack` is root first, as frame ids of one NameTable.
    void add(std::span<const uint32_t> stack, uint64_t count = 1);
    uint64_t total() const { return total_; }
    size_t unique_stacks() const { return stacks_.size(); }

    struct Row {
        uint32_t id;
        uint64_t self = 0;   // samples with this frame as the leaf
        uint64_t total = 0;  // samples with this frame anywhere on the stack, once per sample
    };
    // Sorted by self then total (by_total: the other way round, "which code is on the stack"
    // for beam-bpf-blame), then name; at most `n` rows (0: all).
    std::vector<Row> ranked(const NameTable& names, size_t n, bool by_total = false) const;

    // "root;...;leaf count" lines, sorted by stack text so runs diff cleanly.
    void write_folded(std::ostream& out, const NameTable& names) const;
    // by_total with erlang_only: beam-bpf-blame's ranking of the Erlang code on the stacks.
    void write_top(std::ostream& out, const NameTable& names, size_t n, bool by_total,
                   bool erlang_only = false) const;

private:
    struct Hash {
        size_t operator()(const std::vector<uint32_t>& v) const noexcept;
    };
    std::vector<Row> rows(const NameTable& names) const;
    std::unordered_map<std::vector<uint32_t>, uint64_t, Hash> stacks_;
    uint64_t total_ = 0;
};

}  // namespace bb
