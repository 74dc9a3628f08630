#include "profile/alloc_strata.hpp"

#include <algorithm>
#include <vector>

namespace bb {

void AllocStrata::exact(uint64_t pid, uint64_t words, uint64_t kind, uint64_t ip) {
    if (!pid || !words) return;
    Heap& h = heaps_[pid];
    h.exact += words;
    if (kind) h.kind = kind;
    h.collected |= std::find(exits_.begin(), exits_.end(), ip) == exits_.end();
}

void AllocStrata::sample(uint64_t owner, std::span<const uint32_t> stack, uint64_t words, Who who) {
    if (stack.empty() || !words) return;
    Heap& h = heaps_[owner];
    h.sampled += words;
    h.samples.add(stack, words, who);
}

void AllocStrata::drain_into(Aggregator& agg, uint32_t unsampled) {
    // The pools: heaps of one kind each under the period, merged into the first of them.
    std::unordered_map<uint64_t, Heap*> pools;  // kind -> the pool
    std::vector<uint64_t> pooled;               // pids of heaps merged into another
    for (auto& [pid, h] : heaps_) {
        if (!h.kind || !pid || !h.exact || h.exact >= period_ || !h.collected) continue;
        auto [it, first] = pools.try_emplace(h.kind, &h);
        if (first) continue;
        Heap& pool = *it->second;
        pool.exact += h.exact;
        pool.sampled += h.sampled;
        pool.samples.add_scaled(h.samples, 1.0);
        pooled.push_back(pid);
    }
    for (uint64_t pid : pooled) {
        Heap& h = heaps_[pid];
        if (h.sampled) {
            h = Heap{};
            continue;
        }
        // Nothing of its own was sampled: its words are the pool's, unless the pool has no
        // sample either, when they stay under it (below).
        Heap& pool = *pools[h.kind];
        if (pool.sampled) h = Heap{};
        else pool.exact -= h.exact;
    }
    for (const auto& [pid, h] : heaps_) {
        if (h.sampled) {
            // A heap without an owner (a record of an older walker) or without exact words in
            // this interval keeps its samples' own weights.
            agg.add_scaled(h.samples, pid && h.exact ? static_cast<double>(h.exact) / h.sampled : 1.0);
        } else if (h.exact) {
            const uint32_t stack[] = {unsampled};
            agg.add(stack, h.exact, Who{pid, 0});
        }
    }
    heaps_.clear();
}

}  // namespace bb
