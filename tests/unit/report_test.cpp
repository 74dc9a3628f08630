// The speedscope and HTML writers on hand-built profiles: frames merged by label, stacks
// root first, weights in CPU time, one profile per scheduler kind, the call tree the page
// draws, and that nothing in a function's name can break out of the page's data.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "report/html.hpp"
#include "report/speedscope.hpp"

namespace {

using bb::FrameKind;
using bb::Profile;
using nlohmann::json;

// main -> work -> {leaf, memcpy}; "work" at two lines, which merge unless --lines.
struct Fixture {
    Profile p;
    uint32_t main_, work10, work12, leaf, memcpy_;
    Fixture() {
        p.title = "beam.smp 1234 (OTP 27)";
        p.period_ns = 1'000'000;
        p.duration_ns = 5'000'000'000;
        p.functions = {{FrameKind::vm, "<0.85.0>", "", "", 0, ""},
                       {FrameKind::erlang, "m:work/1", "'m':work/1", "m.erl", 8, "[JIT] m"},
                       {FrameKind::erlang, "m:leaf/0", "'m':leaf/0", "m.erl", 20, "[JIT] m"},
                       {FrameKind::native, "memcpy", "memcpy", "", 0, "libc.so.6"}};
        p.locations = {{0, 0}, {1, 10}, {1, 12}, {2, 21}, {3, 0}};
        main_ = 0, work10 = 1, work12 = 2, leaf = 3, memcpy_ = 4;
        p.samples = {{{main_, work10, leaf}, 6, "<0.85.0>", "", "scheduler 1"},
                     {{main_, work12, leaf}, 2, "<0.85.0>", "", "scheduler 2"},
                     {{main_, work10, memcpy_}, 3, "", "", "dirty cpu scheduler 1"},
                     {{main_, work10}, 1, "", "", ""}};
    }
};

json speedscope(const Profile& p) {
    std::ostringstream out;
    bb::write_speedscope(p, out);
    return json::parse(out.str());
}

std::string html(const Profile& p) {
    std::ostringstream out;
    bb::write_html(p, out);
    return out.str();
}

// The data element's JSON, as the page's script reads it.
json html_data(const std::string& page) {
    const std::string open = "<script type=\"application/json\" id=\"profile\">";
    size_t from = page.find(open);
    EXPECT_NE(from, std::string::npos);
    from += open.size();
    size_t to = page.find("</script>", from);
    EXPECT_NE(to, std::string::npos);
    return json::parse(page.substr(from, to - from));
}

std::vector<std::string> names(const json& file, const json& stack) {
    std::vector<std::string> out;
    for (const json& f : stack) out.push_back(file["shared"]["frames"][f.get<size_t>()]["name"]);
    return out;
}

bool has_frame(const json& data, const std::string& name) {
    for (const json& f : data["frames"])
        if (f["name"] == name) return true;
    return false;
}

size_t count(const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
    return n;
}

TEST(Speedscope, FileAndFrames) {
    Fixture f;
    json j = speedscope(f.p);
    EXPECT_EQ(j["$schema"], "https://www.speedscope.app/file-format-schema.json");
    EXPECT_EQ(j["exporter"], "beam-bpf");
    EXPECT_EQ(j["name"], f.p.title);
    EXPECT_EQ(j["activeProfileIndex"], 0);
    // Both lines of m:work/1 are one frame without --lines, at the function's first line.
    // Frames are in name order.
    const json& frames = j["shared"]["frames"];
    ASSERT_EQ(frames.size(), 4u);
    EXPECT_EQ(frames[0]["name"], "<0.85.0>");
    EXPECT_EQ(frames[1]["name"], "m:leaf/0");
    EXPECT_EQ(frames[2], (json{{"name", "m:work/1"}, {"file", "m.erl"}, {"line", 8}}));
    EXPECT_EQ(frames[3], (json{{"name", "memcpy"}}));  // no file or line known
}

TEST(Speedscope, SamplesRootFirstWeightedByPeriod) {
    Fixture f;
    json j = speedscope(f.p);
    const json& all = j["profiles"][0];
    EXPECT_EQ(all["type"], "sampled");
    EXPECT_EQ(all["unit"], "nanoseconds");
    // Sorted by stack, so the stacks through both lines of m:work/1 are one sample.
    ASSERT_EQ(all["samples"].size(), 3u);
    ASSERT_EQ(all["weights"].size(), 3u);
    EXPECT_EQ(names(j, all["samples"][0]), (std::vector<std::string>{"<0.85.0>", "m:work/1"}));
    EXPECT_EQ(names(j, all["samples"][1]), (std::vector<std::string>{"<0.85.0>", "m:work/1", "m:leaf/0"}));
    EXPECT_EQ(names(j, all["samples"][2]), (std::vector<std::string>{"<0.85.0>", "m:work/1", "memcpy"}));
    EXPECT_EQ(all["weights"], (json{1 * f.p.period_ns, 8 * f.p.period_ns, 3 * f.p.period_ns}));
    uint64_t sum = 0;
    for (const json& w : all["weights"]) sum += w.get<uint64_t>();
    EXPECT_EQ(sum, f.p.total() * f.p.period_ns);
    EXPECT_EQ(all["startValue"], 0);
    EXPECT_EQ(all["endValue"], sum);
}

TEST(Speedscope, CountsWithoutPeriod) {
    Fixture f;
    f.p.period_ns = 0;
    f.p.unit = "calls";
    json all = speedscope(f.p)["profiles"][0];
    EXPECT_EQ(all["unit"], "none");
    EXPECT_EQ(all["weights"], (json{1, 8, 3}));
    EXPECT_EQ(all["endValue"], 12);
}

TEST(Speedscope, LinesAreFramesOfTheirOwn) {
    Fixture f;
    f.p.lines = true;
    json j = speedscope(f.p);
    ASSERT_EQ(j["shared"]["frames"].size(), 5u);
    const json& all = j["profiles"][0];
    ASSERT_EQ(all["samples"].size(), 4u);
    EXPECT_EQ(names(j, all["samples"][1])[1], "m:work/1 (m.erl:10)");
    EXPECT_EQ(names(j, all["samples"][3])[1], "m:work/1 (m.erl:12)");
    EXPECT_EQ(j["shared"]["frames"][all["samples"][3][1].get<size_t>()]["line"], 12);
}

TEST(Speedscope, OneProfilePerSchedulerKind) {
    Fixture f;
    json profiles = speedscope(f.p)["profiles"];
    ASSERT_EQ(profiles.size(), 3u);
    EXPECT_EQ(profiles[0]["name"], f.p.title + ": all schedulers");
    EXPECT_EQ(profiles[1]["name"], f.p.title + ": scheduler");
    EXPECT_EQ(profiles[2]["name"], f.p.title + ": dirty cpu scheduler");
    // "scheduler 1" and "scheduler 2" are one kind; the sample of no known scheduler is in
    // the first profile only.
    EXPECT_EQ(profiles[0]["weights"], (json{1'000'000, 8'000'000, 3'000'000}));
    EXPECT_EQ(profiles[1]["weights"], (json{8'000'000}));
    EXPECT_EQ(profiles[2]["weights"], (json{3'000'000}));
}

TEST(Speedscope, OneKindOneProfile) {
    Fixture f;
    for (auto& s : f.p.samples) s.scheduler = s.scheduler.empty() ? "" : "scheduler 3";
    json profiles = speedscope(f.p)["profiles"];
    ASSERT_EQ(profiles.size(), 1u);
    EXPECT_EQ(profiles[0]["name"], f.p.title);
}

TEST(Speedscope, InvalidUtf8IsReplaced) {
    Fixture f;
    f.p.functions[3].name = "bad\xff";
    EXPECT_NO_THROW(speedscope(f.p));
}

// The page's tree, decoded back into "all;a;b" -> {total, self}.
std::map<std::string, std::pair<uint64_t, uint64_t>> tree(const json& data) {
    std::map<std::string, std::pair<uint64_t, uint64_t>> out;
    const json& t = data["tree"];
    std::vector<std::string> path;  // path[d]: the latest node at depth d
    for (size_t i = 0; i < t.size(); i += 3) {
        int64_t frame = t[i];
        size_t depth = t[i + 1];
        uint64_t self = t[i + 2];
        EXPECT_EQ(frame < 0, depth == 0);
        EXPECT_LE(depth, path.size());  // a child of an earlier node
        path.resize(depth);
        path.push_back(frame < 0 ? "all" : path.back() + ";" + data["frames"][frame]["name"].get<std::string>());
        EXPECT_EQ(out.count(path.back()), 0u) << path.back() << " twice";
        out[path.back()].second = self;
        for (const std::string& node : path) out[node].first += self;
    }
    return out;
}

TEST(Html, MergedTree) {
    Fixture f;
    json data = html_data(html(f.p));
    EXPECT_EQ(data["total"], 12);
    EXPECT_EQ(data["period_ns"], f.p.period_ns);
    EXPECT_EQ(data["title"], f.p.title);
    ASSERT_EQ(data["frames"].size(), 4u);
    EXPECT_EQ(data["frames"][1]["kind"], "erlang");
    EXPECT_EQ(data["frames"][3]["kind"], "native");
    EXPECT_EQ(data["frames"][3]["mapping"], "libc.so.6");
    using P = std::pair<uint64_t, uint64_t>;
    auto t = tree(data);
    EXPECT_EQ(t.size(), 5u);
    EXPECT_EQ(t["all"], P(12, 0));
    EXPECT_EQ(t["all;<0.85.0>"], P(12, 0));
    EXPECT_EQ(t["all;<0.85.0>;m:work/1"], P(12, 1));
    EXPECT_EQ(t["all;<0.85.0>;m:work/1;m:leaf/0"], P(8, 8));
    EXPECT_EQ(t["all;<0.85.0>;m:work/1;memcpy"], P(3, 3));
}

TEST(Html, LinesSplitTheTree) {
    Fixture f;
    f.p.lines = true;
    auto t = tree(html_data(html(f.p)));
    using P = std::pair<uint64_t, uint64_t>;
    EXPECT_EQ(t["all;<0.85.0>;m:work/1 (m.erl:10)"], P(10, 1));
    EXPECT_EQ(t["all;<0.85.0>;m:work/1 (m.erl:12)"], P(2, 0));
}

TEST(Html, ChildrenByName) {
    Fixture f;
    json data = html_data(html(f.p));
    // Pre-order: root, <0.85.0>, m:work/1, then its callees m:leaf/0 before memcpy.
    const json& t = data["tree"];
    ASSERT_EQ(t.size(), 15u);
    EXPECT_EQ(data["frames"][t[9].get<size_t>()]["name"], "m:leaf/0");
    EXPECT_EQ(data["frames"][t[12].get<size_t>()]["name"], "memcpy");
    EXPECT_EQ(t[10], 3);  // depth
    EXPECT_EQ(t[13], 3);
}

TEST(Html, SelfContained) {
    Fixture f;
    f.p.functions[3].name = "fetch https://example.com/x";  // a URL in the data is escaped too
    std::string page = html(f.p);
    EXPECT_EQ(page.find("http://"), std::string::npos);
    EXPECT_EQ(page.find("https://"), std::string::npos);
    EXPECT_EQ(page.find("@BB_PROFILE_JSON@"), std::string::npos);
    EXPECT_NE(page.find("id=\"matched\""), std::string::npos);
    EXPECT_TRUE(has_frame(html_data(page), "fetch https://example.com/x"));
}

TEST(Html, NameCannotCloseTheScript) {
    Fixture f;
    const std::string evil = "</script><script>alert(1)";
    f.p.functions[2].name = evil;
    f.p.functions[3].name = "<!--<script>";
    std::string page = html(f.p);
    EXPECT_EQ(page.find(evil), std::string::npos);
    EXPECT_EQ(page.find("<!--<script>"), std::string::npos);
    // Only the template's own script elements close.
    Fixture plain;
    EXPECT_EQ(count(page, "</script"), count(html(plain.p), "</script"));
    EXPECT_TRUE(has_frame(html_data(page), evil));
    EXPECT_TRUE(has_frame(html_data(page), "<!--<script>"));
}

TEST(Html, ManyStacks) {
    // 100k distinct stacks merge into a tree of a few hundred thousand nodes, quickly.
    Profile p;
    for (uint32_t i = 0; i < 1000; i++) {
        std::string name = "m:f" + std::to_string(i) + "/0";
        p.functions.push_back({FrameKind::erlang, name, name, "", 0, ""});
        p.locations.push_back({i});
    }
    for (uint32_t i = 0; i < 100'000; i++)
        p.samples.push_back({{0, 1 + i % 7, 10 + i % 97, 200 + i % 701, 999}, 1 + i % 3, "", "", ""});
    json data = html_data(html(p));
    // Read with integers only (tree() is slow on this many nodes): every stack is distinct,
    // so there is a leaf per stack, under 7 callees of m:f0/0.
    const json& t = data["tree"];
    uint64_t selfs = 0;
    size_t leaves = 0;
    std::map<int64_t, uint64_t> under;  // depth 2 node's frame -> its total
    int64_t current = -1;
    for (size_t i = 0; i < t.size(); i += 3) {
        int64_t frame = t[i], depth = t[i + 1];
        uint64_t self = t[i + 2];
        selfs += self;
        if (depth == 2) current = frame;
        if (depth >= 2) under[current] += self;
        if (depth == 5) leaves++;
    }
    EXPECT_EQ(selfs, p.total());
    EXPECT_EQ(leaves, p.samples.size());
    ASSERT_EQ(under.size(), 7u);
    uint64_t f1 = 0;
    for (const auto& s : p.samples)
        if (s.stack[1] == 1) f1 += s.count;
    EXPECT_EQ(data["frames"][under.begin()->first]["name"], "m:f1/0");  // name order
    EXPECT_EQ(under.begin()->second, f1);
}

}  // namespace
