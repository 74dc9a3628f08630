#include "profile/alloc_strata.hpp"

namespace bb {

void AllocStrata::exact(uint64_t pid, uint64_t words) {
    if (pid && words) heaps_[pid].exact += words;
}

void AllocStrata::sample(uint64_t owner, std::span<const uint32_t> stack, uint64_t words, Who who) {
    if (stack.empty() || !words) return;
    Heap& h = heaps_[owner];
    h.sampled += words;
    h.samples.add(stack, words, who);
}

void AllocStrata::drain_into(Aggregator& agg, uint32_t unsampled) {
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
