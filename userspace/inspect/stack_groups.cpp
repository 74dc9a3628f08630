#include "inspect/stack_groups.hpp"

#include <algorithm>
#include <functional>
#include <unordered_map>

namespace bb {

namespace {

struct KeyHash {
    size_t operator()(const StackKey& k) const {
        size_t h = std::hash<std::string>{}(k.state);
        for (uint32_t f : k.frames) h = h * 1'000'003 ^ f;
        return h;
    }
};

}  // namespace

std::vector<StackGroup> group_stacks(const std::vector<StackKey>& stacks, size_t kept) {
    std::vector<StackGroup> groups;
    std::unordered_map<StackKey, size_t, KeyHash> index;  // key -> its group
    for (size_t i = 0; i < stacks.size(); i++) {
        auto [it, added] = index.try_emplace(stacks[i], groups.size());
        if (added) groups.push_back({stacks[i], 0, {}});
        StackGroup& g = groups[it->second];
        g.count++;
        if (g.first.size() < kept) g.first.push_back(i);
    }
    std::stable_sort(groups.begin(), groups.end(),
                     [](const StackGroup& a, const StackGroup& b) { return a.count > b.count; });
    return groups;
}

std::vector<std::pair<uint32_t, size_t>> frame_runs(const std::vector<uint32_t>& frames) {
    std::vector<std::pair<uint32_t, size_t>> runs;
    for (uint32_t f : frames) {
        if (!runs.empty() && runs.back().first == f) runs.back().second++;
        else runs.emplace_back(f, 1);
    }
    return runs;
}

}  // namespace bb
