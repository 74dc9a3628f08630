#include "report/html.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iterator>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bb {

namespace embedded {
// userspace/report/flamegraph.html, compiled in by scripts/embed_file.cmake.
extern const std::string_view flamegraph_html;
}  // namespace embedded

namespace {

// Where the template takes the data: the body of a <script type="application/json">.
constexpr std::string_view placeholder = "@BB_PROFILE_JSON@";

const char* kind_name(FrameKind k) {
    switch (k) {
    case FrameKind::erlang: return "erlang";
    case FrameKind::native: return "native";
    case FrameKind::kernel: return "kernel";
    case FrameKind::vm: return "vm";
    }
    return "vm";
}

// JSON text made safe inside a <script> element. '<' can only occur inside strings, where
// \u003c means the same, so no name can close the element ("</script>") or open a comment;
// likewise "://" becomes ":\/\/" so the file holds no URL that a reader (or a check for
// external resources) could take for one.
std::string script_safe(const std::string& json) {
    std::string s;
    s.reserve(json.size() + json.size() / 64);
    for (size_t i = 0; i < json.size(); i++) {
        if (json[i] == '<') {
            s += "\\u003c";
        } else if (json.compare(i, 3, "://") == 0) {
            s += ":\\/\\/";
            i += 2;
        } else {
            s += json[i];
        }
    }
    return s;
}

// A frame as the page shows it on hover. Its line is where the function starts unless frames
// are per line (--lines).
nlohmann::json describe(const Profile& p, uint32_t location, const std::string& label) {
    const Function& f = p.functions[p.locations[location].function];
    nlohmann::json frame = {{"name", label}, {"kind", kind_name(f.kind)}};
    if (!f.file.empty()) frame["file"] = f.file;
    uint32_t line = p.shown_line(location);
    if (line) frame["line"] = line;
    if (!f.mapping.empty()) frame["mapping"] = f.mapping;
    return frame;
}

}  // namespace

void write_html(const Profile& p, std::ostream& out) {
    using nlohmann::json;

    // Frames per label, as in the folded output, so equal labels merge into one box.
    LabelFrames lf = label_frames(p);
    const std::vector<uint32_t>& frame_of_location = lf.of_location;
    json frames = json::array();
    for (uint32_t f = 0; f < lf.labels.size(); f++) frames.push_back(describe(p, lf.location[f], lf.labels[f]));
    // Direct recursion collapsed, as flame graph tools offer (inferno's --collapse-recursion):
    // a run of one function is one box "f (recursive)" whatever its length, so a recursion
    // 3,000 deep is not a tower 3,000 rows tall, and runs of different lengths merge instead of
    // splitting into towers of their own. The folded output keeps every frame.
    std::unordered_map<uint32_t, uint32_t> recursive;  // frame -> its "(recursive)" frame
    auto recursive_frame = [&](uint32_t f) {
        auto [it, fresh] = recursive.try_emplace(f, static_cast<uint32_t>(frames.size()));
        if (fresh) {
            json r = frames[f];
            r["name"] = lf.labels[f] + " (recursive)";
            r["recursive"] = true;
            frames.push_back(std::move(r));
        }
        return it->second;
    };

    // Merge the stacks into a call tree here rather than in the page: a long run has 100k+
    // distinct stacks, and the browser then only lays boxes out. Sorted, equal stacks are
    // adjacent, a stack comes just before those it is a prefix of, and callees come in name
    // order (as flame graphs are usually drawn, so two runs of the same code look alike). One
    // pass then builds the tree in pre-order, each stack sharing the path of the one before.
    std::vector<std::pair<std::vector<uint32_t>, uint64_t>> stacks;
    stacks.reserve(p.samples.size());
    for (const Sample& s : p.samples) {
        if (s.count == 0) continue;
        std::vector<uint32_t> frames_of_stack;
        frames_of_stack.reserve(s.stack.size());
        uint32_t last = UINT32_MAX;
        for (uint32_t loc : s.stack) {
            const uint32_t f = frame_of_location[loc];
            if (f == last) frames_of_stack.back() = recursive_frame(f);
            else frames_of_stack.push_back(f);
            last = f;
        }
        stacks.emplace_back(std::move(frames_of_stack), s.count);
    }
    std::sort(stacks.begin(), stacks.end());

    struct Node {
        int64_t frame;  // -1: the root, "all"
        uint32_t depth;
        uint64_t self;
    };
    std::vector<Node> nodes{{-1, 0, 0}};
    std::vector<uint32_t> path{0};  // the nodes of the previous stack, root first
    for (const auto& [stack, count] : stacks) {
        size_t same = 0;
        while (same < stack.size() && same + 1 < path.size() && nodes[path[same + 1]].frame == stack[same]) same++;
        path.resize(same + 1);
        for (size_t k = same; k < stack.size(); k++) {
            path.push_back(static_cast<uint32_t>(nodes.size()));
            nodes.push_back({stack[k], static_cast<uint32_t>(k + 1), 0});
        }
        nodes[path.back()].self += count;
    }

    json data = {{"title", p.title},
                 {"unit", p.unit},
                 {"time_of", p.kind().time_of},  // set for timed kinds only
                 {"period_ns", p.period_ns},
                 {"start_unix_ns", p.start_unix_ns},
                 {"duration_ns", p.duration_ns},
                 {"total", p.total()},
                 {"lines", p.lines},
                 {"frames", std::move(frames)}};
    // Names come from the target's memory and symbol tables: replace bytes that are not UTF-8
    // rather than throw away the whole report.
    std::string text = script_safe(data.dump(-1, ' ', false, json::error_handler_t::replace));
    // Then "tree": [frame, depth, self] per node in pre-order; a node's parent is the last
    // node before it one level up. It is most of the data, and only numbers: written as text
    // here, since a json value per number costs several times as much.
    text.pop_back();  // the closing '}'
    text += ",\"tree\":[";
    auto to = std::back_inserter(text);
    for (size_t i = 0; i < nodes.size(); i++)
        fmt::format_to(to, "{}{},{},{}", i ? "," : "", nodes[i].frame, nodes[i].depth, nodes[i].self);
    text += "]}";

    std::string_view page = embedded::flamegraph_html;
    size_t at = page.find(placeholder);
    out << page.substr(0, at);
    if (at != std::string_view::npos) out << text << page.substr(at + placeholder.size());
}

}  // namespace bb
