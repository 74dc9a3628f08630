#include "report/speedscope.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

namespace bb {

namespace {

// "dirty cpu scheduler 2" -> "dirty cpu scheduler": the kind is what tells work apart (normal
// schedulers run Erlang code, dirty ones long NIFs, GC and I/O), the number rarely does.
std::string scheduler_kind(const std::string& scheduler) {
    size_t end = scheduler.find_last_not_of("0123456789");
    if (end == std::string::npos) return "";
    end = scheduler.find_last_not_of(' ', end);
    return end == std::string::npos ? "" : scheduler.substr(0, end + 1);
}

// Known kinds in the order a reader expects them; any other kind after them, by name.
bool kind_before(const std::string& a, const std::string& b) {
    static const std::vector<std::string> known = {"scheduler", "dirty cpu scheduler", "dirty io scheduler"};
    auto rank = [](const std::string& k) { return std::find(known.begin(), known.end(), k) - known.begin(); };
    if (rank(a) != rank(b)) return rank(a) < rank(b);
    return a < b;
}

}  // namespace

void write_speedscope(const Profile& p, std::ostream& out) {
    using nlohmann::json;

    LabelFrames lf = label_frames(p);
    const std::vector<uint32_t>& frame_of_location = lf.of_location;
    json frames = json::array();
    for (uint32_t i = 0; i < lf.labels.size(); i++) {
        const Function& f = p.functions[p.locations[lf.location[i]].function];
        json out_frame = {{"name", lf.labels[i]}};
        if (!f.file.empty()) out_frame["file"] = f.file;
        uint32_t line = p.shown_line(lf.location[i]);
        if (line) out_frame["line"] = line;
        frames.push_back(std::move(out_frame));
    }

    // Weights are CPU time when a sample stands for a known period, so speedscope shows
    // milliseconds; otherwise plain counts ("none").
    const bool timed = p.period_ns > 0 || p.kind().timed;
    // The samples of one scheduler kind, or all of them (kind empty).
    auto profile = [&](const std::string& name, const std::string& kind) {
        // The order of the samples is speedscope's time axis (its "Time Order" view), but our
        // counts have no order in time. Sorted by stack, that view reads as a flame graph with
        // callees by name, and equal stacks (of two schedulers, say) become one sample.
        std::vector<std::pair<std::vector<uint32_t>, uint64_t>> stacks;
        for (const Sample& s : p.samples) {
            if (s.count == 0 || s.stack.empty()) continue;
            if (!kind.empty() && scheduler_kind(s.scheduler) != kind) continue;
            std::vector<uint32_t> stack;
            for (uint32_t loc : s.stack) stack.push_back(frame_of_location[loc]);
            stacks.emplace_back(std::move(stack), s.count);
        }
        std::sort(stacks.begin(), stacks.end());
        json samples = json::array(), weights = json::array();
        uint64_t sum = 0;
        for (size_t i = 0; i < stacks.size(); i++) {
            uint64_t count = stacks[i].second;
            while (i + 1 < stacks.size() && stacks[i + 1].first == stacks[i].first) count += stacks[++i].second;
            uint64_t weight = p.period_ns ? count * p.period_ns : count;
            samples.push_back(stacks[i].first);
            weights.push_back(weight);
            sum += weight;
        }
        // startValue/endValue span the weights, not wall time: speedscope lays the samples
        // end to end, and CPU time on many schedulers exceeds the wall-clock duration.
        return json{{"type", "sampled"},
                    {"name", name},
                    {"unit", timed ? "nanoseconds" : "none"},
                    {"startValue", 0},
                    {"endValue", sum},
                    {"samples", std::move(samples)},
                    {"weights", std::move(weights)}};
    };

    // Samples of unknown scheduler (empty) are only in the profile of all samples.
    std::vector<std::string> kinds;
    for (const Sample& s : p.samples) {
        std::string k = scheduler_kind(s.scheduler);
        if (!k.empty() && std::find(kinds.begin(), kinds.end(), k) == kinds.end()) kinds.push_back(k);
    }
    std::sort(kinds.begin(), kinds.end(), kind_before);

    const std::string title = p.title.empty() ? "beam-bpf" : p.title;
    json profiles = json::array();
    if (kinds.size() > 1) {
        profiles.push_back(profile(title + ": all schedulers", ""));
        for (const std::string& k : kinds) profiles.push_back(profile(title + ": " + k, k));
    } else {
        profiles.push_back(profile(title, ""));
    }

    json file = {{"$schema", "https://www.speedscope.app/file-format-schema.json"},
                 {"name", title},
                 {"exporter", "beam-bpf"},
                 {"activeProfileIndex", 0},
                 {"shared", {{"frames", std::move(frames)}}},
                 {"profiles", std::move(profiles)}};
    // Names come from the target's memory and symbol tables: replace bytes that are not UTF-8
    // rather than throw away the whole report.
    out << file.dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
}

}  // namespace bb
