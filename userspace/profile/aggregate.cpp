#include "profile/aggregate.hpp"

#include <map>
#include <utility>

namespace bb {

size_t Aggregator::Hash::operator()(const Key& k) const noexcept {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids and who ran them
    for (uint32_t x : k.stack) h = (h ^ x) * 1099511628211ull;
    h = (h ^ k.who.erl_pid) * 1099511628211ull;
    h = (h ^ k.who.sched) * 1099511628211ull;
    return static_cast<size_t>(h);
}

void Aggregator::add(std::span<const uint32_t> stack, uint64_t count, Who who) {
    if (stack.empty() || count == 0) return;
    // Look up with a reused key to avoid an allocation per sample on the common hit.
    thread_local Key key;
    key.stack.assign(stack.begin(), stack.end());
    key.who = who;
    auto it = samples_.find(key);
    if (it != samples_.end()) it->second += count;
    else samples_.emplace(key, count);
    total_ += count;
}

void Aggregator::add_scaled(const Aggregator& from, double factor) {
    for (const auto& [key, count] : from.samples_) {
        const double scaled = static_cast<double>(count) * factor + 0.5;
        add(key.stack, scaled < 1 ? 1 : static_cast<uint64_t>(scaled), key.who);
    }
}

Profile Aggregator::profile(const FrameTable& frames, const ProfileMeta& meta) const {
    Profile p;
    p.title = meta.title;
    p.unit = meta.unit;
    p.period_ns = meta.period_ns;
    p.start_unix_ns = meta.start_unix_ns;
    p.duration_ns = meta.duration_ns;
    p.lines = meta.lines;
    // Only the functions and locations these samples use, renumbered: an interval of --every
    // names what it holds, not everything the run has seen.
    std::unordered_map<uint32_t, uint32_t> location_ids, function_ids;
    auto location = [&](uint32_t id) {
        auto [it, added] = location_ids.try_emplace(id, static_cast<uint32_t>(p.locations.size()));
        if (added) {
            Location l = frames.locations()[id];
            auto [fit, fadded] = function_ids.try_emplace(l.function, static_cast<uint32_t>(p.functions.size()));
            if (fadded) p.functions.push_back(frames.functions()[l.function]);
            l.function = fit->second;
            p.locations.push_back(l);
        }
        return it->second;
    };
    // --by-process: a root frame per process name, made here rather than in the FrameTable, which
    // lives as long as the run: processes come and go by the million on a busy node. A process of
    // a kind ({rabbit_channel,...}) is under its kind's root, its own name a level below.
    constexpr uint32_t kNoFrame = UINT32_MAX;
    std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> process_roots;  // pid term -> root, name
    std::map<std::pair<uint32_t, std::string>, uint32_t> process_frames;        // (parent, text) -> location
    std::unordered_map<uint32_t, size_t> pids_of_frame;                         // location -> processes under it
    auto process_frame = [&](uint32_t parent, std::string text) {
        auto [it, first] = process_frames.try_emplace({parent, text}, static_cast<uint32_t>(p.locations.size()));
        if (first) {
            Function f;
            f.kind = FrameKind::vm;
            f.name = f.system_name = std::move(text);
            f.mapping = "[process]";
            p.functions.push_back(std::move(f));
            p.locations.push_back(Location{static_cast<uint32_t>(p.functions.size() - 1)});
        }
        pids_of_frame[it->second]++;
        return it->second;
    };
    auto process_root = [&](uint64_t pid) {
        auto [it, added] = process_roots.try_emplace(pid, kNoFrame, kNoFrame);
        if (added) {
            std::string name = meta.process_root(pid), kind = meta.process_kind ? meta.process_kind(pid) : "";
            if (kind.empty()) {
                it->second.first = process_frame(kNoFrame, std::move(name));
            } else {
                it->second.first = process_frame(kNoFrame, std::move(kind));
                it->second.second = process_frame(it->second.first, std::move(name));
            }
        }
        return it->second;
    };
    p.samples.reserve(samples_.size());
    for (const auto& [key, count] : samples_) {
        Sample s;
        s.stack.reserve(key.stack.size() + 1);
        if (key.who.erl_pid && meta.process_root) {
            auto [root, name] = process_root(key.who.erl_pid);
            s.stack.push_back(root);
            if (name != kNoFrame) s.stack.push_back(name);
        }
        for (uint32_t id : key.stack) s.stack.push_back(location(id));
        s.count = count;
        if (key.who.erl_pid && meta.pid_text) s.pid = meta.pid_text(key.who.erl_pid);
        if (key.who.erl_pid && meta.process_text) s.process = meta.process_text(key.who.erl_pid);
        if (key.who.sched && meta.sched_text) s.scheduler = meta.sched_text(key.who.sched);
        p.samples.push_back(std::move(s));
    }
    for (const auto& [frame, n] : pids_of_frame)
        if (n > 1) p.functions[p.locations[frame].function].name += " (" + std::to_string(n) + " processes)";
    return p;
}

}  // namespace bb
