#include "aggregate.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <unordered_set>

namespace bb {

size_t Aggregator::Hash::operator()(const std::vector<uint32_t>& v) const noexcept {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids
    for (uint32_t x : v) h = (h ^ x) * 1099511628211ull;
    return static_cast<size_t>(h);
}

void Aggregator::add(std::span<const uint32_t> stack, uint64_t count) {
    if (stack.empty() || count == 0) return;
    // Look up with a reused key to avoid an allocation per sample on the common hit.
    thread_local std::vector<uint32_t> key;
    key.assign(stack.begin(), stack.end());
    auto it = stacks_.find(key);
    if (it != stacks_.end())
        it->second += count;
    else
        stacks_.emplace(key, count);
    total_ += count;
}

std::vector<Aggregator::Row> Aggregator::rows(const NameTable& names) const {
    std::vector<Row> rows(names.size());
    for (uint32_t i = 0; i < rows.size(); i++) rows[i].id = i;
    std::unordered_set<uint32_t> seen;
    for (const auto& [stack, count] : stacks_) {
        rows[stack.back()].self += count;
        seen.clear();
        for (uint32_t id : stack)
            if (seen.insert(id).second) rows[id].total += count;  // recursion counts once
    }
    std::erase_if(rows, [](const Row& r) { return r.total == 0; });
    return rows;
}

std::vector<Aggregator::Row> Aggregator::ranked(const NameTable& names, size_t n, bool by_total) const {
    auto r = rows(names);
    auto key = [by_total](const Row& x) {
        return by_total ? std::pair(x.total, x.self) : std::pair(x.self, x.total);
    };
    std::sort(r.begin(), r.end(), [&](const Row& a, const Row& b) {
        if (key(a) != key(b)) return key(a) > key(b);
        return names.name(a.id) < names.name(b.id);
    });
    if (n && r.size() > n) r.resize(n);
    return r;
}

void Aggregator::write_folded(std::ostream& out, const NameTable& names) const {
    std::vector<std::pair<std::string, uint64_t>> lines;
    lines.reserve(stacks_.size());
    for (const auto& [stack, count] : stacks_) {
        std::string s;
        for (size_t i = 0; i < stack.size(); i++) {
            if (i) s += ';';
            s += names.name(stack[i]);
        }
        lines.emplace_back(std::move(s), count);
    }
    std::sort(lines.begin(), lines.end());
    for (const auto& [s, c] : lines) fmt::print(out, "{} {}\n", s, c);
}

void Aggregator::write_top(std::ostream& out, const NameTable& names, size_t n, bool by_total,
                           bool erlang_only) const {
    double all = total_ ? static_cast<double>(total_) : 1.0;
    auto rows = ranked(names, 0, by_total);
    if (erlang_only) std::erase_if(rows, [&](const Row& r) { return !names.is_erlang(r.id); });
    if (n && rows.size() > n) rows.resize(n);
    fmt::print(out, "{:>6}  {:>6}  {}\n", "SELF%", "TOTAL%", "FUNCTION");
    for (const auto& r : rows)
        fmt::print(out, "{:6.1f}  {:6.1f}  {}\n", 100.0 * r.self / all, 100.0 * r.total / all,
                   names.name(r.id));
}

}  // namespace bb
