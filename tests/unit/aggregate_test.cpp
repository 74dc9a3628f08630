// Aggregation: self/total shares, recursion counted once per sample, folded output, frame
// names (Elixir's), and the pid-term text both tools print and parse.
#include <gtest/gtest.h>

#include "target/release.hpp"

#include <map>
#include <sstream>

#include "profile/aggregate.hpp"
#include "profile/alloc_strata.hpp"
#include "profile/frames.hpp"
#include "report/report.hpp"
#include "report/text.hpp"
#include "target/release.hpp"
#include "target/vm.hpp"

namespace {

using bb::Aggregator;
using bb::FrameKind;
using bb::FrameTable;

struct Fixture {
    FrameTable frames;
    std::string file = "m.erl";
    uint32_t root = frames.erlang("m:root/0", "m", &file, 1, 2), mid = frames.erlang("m:mid/1", "m", &file, 5, 6),
             leaf = frames.erlang("m:leaf/2", "m", &file, 9, 10),
             native = frames.other(FrameKind::native, "memcpy", "libc.so.6"),
             shared = frames.erlang("global::i_test_yield_shared", "global", nullptr, 0, 0);
    bb::Profile profile(const Aggregator& a, bool lines = false) const {
        bb::ProfileMeta m;
        m.lines = lines;
        return a.profile(frames, m);
    }
};

TEST(Aggregate, SelfAndTotal) {
    Fixture f;
    Aggregator a;
    a.add(std::vector<uint32_t>{f.root, f.mid, f.leaf}, 6);
    a.add(std::vector<uint32_t>{f.root, f.mid}, 3);
    a.add(std::vector<uint32_t>{f.root, f.native}, 1);
    EXPECT_EQ(a.total(), 10u);
    EXPECT_EQ(a.unique_stacks(), 3u);
    auto p = f.profile(a);
    auto rows = bb::top_rows(p, 0);
    ASSERT_EQ(rows.size(), 4u);
    EXPECT_EQ(rows[0].label, "m:leaf/2");
    EXPECT_EQ(rows[0].self, 6u);
    EXPECT_EQ(rows[0].total, 6u);
    EXPECT_EQ(rows[1].label, "m:mid/1");
    EXPECT_EQ(rows[1].self, 3u);
    EXPECT_EQ(rows[1].total, 9u);
    EXPECT_EQ(rows[2].label, "memcpy");
    EXPECT_EQ(rows[3].label, "m:root/0");
    EXPECT_EQ(rows[3].self, 0u);
    EXPECT_EQ(rows[3].total, 10u);
    EXPECT_EQ(bb::top_rows(p, 2).size(), 2u);
    EXPECT_EQ(bb::top_rows(p, 1, true).front().label, "m:root/0");
}

TEST(Aggregate, RecursionCountsOncePerSample) {
    Fixture f;
    Aggregator a;
    a.add(std::vector<uint32_t>{f.root, f.mid, f.mid, f.mid, f.leaf}, 4);
    for (const auto& r : bb::top_rows(f.profile(a), 0, true)) EXPECT_LE(r.total, 4u) << r.label;
}

TEST(Aggregate, SameStackMerges) {
    Fixture f;
    Aggregator a;
    for (int i = 0; i < 1000; i++) a.add(std::vector<uint32_t>{f.root, f.leaf});
    EXPECT_EQ(a.unique_stacks(), 1u);
    EXPECT_EQ(a.total(), 1000u);
    a.add(std::vector<uint32_t>{}, 5);  // nothing left to show: not a sample
    EXPECT_EQ(a.total(), 1000u);
    a.add(std::vector<uint32_t>{f.root, f.leaf}, 1, bb::Who{0x53, 1 << 16 | 2});  // another process
    EXPECT_EQ(a.unique_stacks(), 2u);
}

TEST(Aggregate, FoldedIsRootFirstSortedAndParseable) {
    Fixture f;
    Aggregator a;
    a.add(std::vector<uint32_t>{f.root, f.mid, f.leaf}, 2);
    a.add(std::vector<uint32_t>{f.root, f.native}, 7);
    a.add(std::vector<uint32_t>{f.root, f.native}, 1, bb::Who{0x53, 0});  // folds with the above
    std::ostringstream out;
    bb::write_folded(f.profile(a), out);
    EXPECT_EQ(out.str(), "m:root/0;m:mid/1;m:leaf/2 2\nm:root/0;memcpy 8\n");
}

// Locations of one function at different lines are one frame unless --lines tells them apart.
TEST(Aggregate, LinesSplitFramesOnlyWhenAsked) {
    Fixture f;
    uint32_t leaf_line_11 = f.frames.erlang("m:leaf/2", "m", &f.file, 9, 11);
    EXPECT_NE(leaf_line_11, f.leaf);
    EXPECT_EQ(f.frames.function(leaf_line_11).name, f.frames.function(f.leaf).name);
    Aggregator a;
    a.add(std::vector<uint32_t>{f.root, f.leaf}, 2);
    a.add(std::vector<uint32_t>{f.root, leaf_line_11}, 3);
    std::ostringstream merged, split;
    bb::write_folded(f.profile(a), merged);
    bb::write_folded(f.profile(a, true), split);
    EXPECT_EQ(merged.str(), "m:root/0;m:leaf/2 5\n");
    EXPECT_EQ(split.str(), "m:root/0 (m.erl:2);m:leaf/2 (m.erl:10) 2\nm:root/0 (m.erl:2);m:leaf/2 (m.erl:11) 3\n");
}

TEST(Aggregate, ErlangOnlyTableDropsNativeAndSharedCode) {
    Fixture f;
    Aggregator a;
    a.add(std::vector<uint32_t>{f.root, f.native}, 5);
    a.add(std::vector<uint32_t>{f.root, f.shared}, 5);
    std::ostringstream out;
    bb::write_top(f.profile(a), out, {.rows = 0, .by_total = true, .erlang_only = true});
    EXPECT_NE(out.str().find("m:root/0"), std::string::npos);
    EXPECT_EQ(out.str().find("memcpy"), std::string::npos);
    EXPECT_EQ(out.str().find("global::"), std::string::npos);
    // root: in every sample, and the innermost Erlang function of each (blame's SELF%).
    EXPECT_NE(out.str().find(" 100.0   100.0  m:root/0"), std::string::npos) << out.str();
}

// The default table: a sample's self goes to its innermost Erlang function, the C it called
// included (memcpy under m:leaf/2 is m:leaf/2's); the native code by its own time below.
// --flat: every frame by its own time, as before.
TEST(Aggregate, ErlangFirstChargesNativeTimeToItsCaller) {
    Fixture f;
    uint32_t gc = f.frames.other(FrameKind::vm, "[gc]", "beam.smp");
    Aggregator a;
    a.add(std::vector<uint32_t>{f.root, f.mid, f.leaf, f.native}, 6);
    a.add(std::vector<uint32_t>{f.root, f.mid}, 3);
    a.add(std::vector<uint32_t>{gc, f.native}, 1);
    auto rows = bb::top_rows(f.profile(a), 0, false, true);
    ASSERT_GE(rows.size(), 3u);
    EXPECT_EQ(rows[0].label, "m:leaf/2");
    EXPECT_EQ(rows[0].self, 6u);
    EXPECT_EQ(rows[1].label, "m:mid/1");
    EXPECT_EQ(rows[1].self, 3u);
    EXPECT_EQ(rows[2].label, "[gc]");  // no Erlang frame: its VM frame
    EXPECT_EQ(rows[2].self, 1u);
    std::ostringstream out, flat;
    bb::write_top(f.profile(a), out, {.rows = 20});
    EXPECT_EQ(out.str(),
              " SELF%  TOTAL%  FUNCTION\n"
              "  60.0    60.0  m:leaf/2\n"
              "  30.0    90.0  m:mid/1\n"
              "  10.0    10.0  [gc]\n"
              "   0.0    90.0  m:root/0\n"
              "\n"
              " SELF%  TOTAL%  NATIVE CODE (part of the Erlang SELF% above; --flat ranks it with them)\n"
              "  70.0    70.0  memcpy\n");
    bb::write_top(f.profile(a), flat, {.rows = 20, .flat = true});
    EXPECT_EQ(flat.str().substr(0, flat.str().find('\n', 26) + 1),
              " SELF%  TOTAL%  FUNCTION\n  70.0    70.0  memcpy\n");
}

// A scheduler with no process in its loop: the JIT's shared code (global::process_main) is VM
// code, not a function to rank first; the sample goes to the pseudo frame above it. Before, the
// loop was the top row on RabbitMQ (25.8%) and the Elixir app.
TEST(Aggregate, ErlangFirstChargesTheSchedulerLoopToItsPseudoFrame) {
    Fixture f;
    uint32_t none = f.frames.other(FrameKind::vm, "[no Erlang process]", "beam.smp");
    uint32_t loop = f.frames.erlang("global::process_main", "global", nullptr, 0, 0);
    uint32_t bif = f.frames.erlang("global::call_light_bif_shared", "global", nullptr, 0, 0);
    Aggregator a;
    a.add(std::vector<uint32_t>{none, loop, f.native}, 5);
    a.add(std::vector<uint32_t>{f.root, f.mid, bif, f.native}, 2);
    a.add(std::vector<uint32_t>{loop, f.native}, 1);  // no pseudo frame: the innermost VM frame
    auto rows = bb::top_rows(f.profile(a), 0, false, true);
    std::map<std::string, uint64_t> self;
    for (const auto& r : rows) self[r.label] = r.self;
    EXPECT_EQ(self["[no Erlang process]"], 5u);
    EXPECT_EQ(self["m:mid/1"], 2u);
    EXPECT_EQ(self["global::process_main"], 1u);
    EXPECT_EQ(self["global::call_light_bif_shared"], 0u);
}

// --by-process: one root frame per process over the same code, none for samples of no process.
TEST(Aggregate, ByProcessRootsEachProcess) {
    Fixture f;
    Aggregator a;
    std::vector<uint32_t> s1{f.root, f.leaf};
    a.add(s1, 3, {.erl_pid = 0x53});
    a.add(s1, 2, {.erl_pid = 0x63});
    a.add(std::vector<uint32_t>{f.native}, 1);
    bb::ProfileMeta m;
    m.process_root = [](uint64_t pid) { return pid == 0x53 ? "alpha <0.5.0>" : "<0.6.0>"; };
    std::ostringstream out;
    bb::write_folded(a.profile(f.frames, m), out);
    EXPECT_EQ(out.str(), "<0.6.0>;m:root/0;m:leaf/2 2\nalpha <0.5.0>;m:root/0;m:leaf/2 3\nmemcpy 1\n");
}

// --by-process with kinds: the processes of a kind under one root that counts them, each one's
// name a frame below it (counted where several share it); a process of no kind at the root.
TEST(Aggregate, ByProcessGroupsAKindUnderOneRoot) {
    Fixture f;
    Aggregator a;
    std::vector<uint32_t> s1{f.root, f.leaf};
    a.add(s1, 3, {.erl_pid = 0x13});
    a.add(s1, 2, {.erl_pid = 0x23});
    a.add(s1, 4, {.erl_pid = 0x33});
    a.add(s1, 1, {.erl_pid = 0x43});
    bb::ProfileMeta m;
    m.process_root = [](uint64_t pid) {
        return pid == 0x13 ? "{ch,1}" : pid == 0x23 ? "{ch,2}" : pid == 0x33 ? "{ch,2}" : "alone";
    };
    m.process_kind = [](uint64_t pid) { return pid == 0x43 ? "" : "{ch,...}"; };
    std::ostringstream out;
    bb::write_folded(a.profile(f.frames, m), out);
    EXPECT_EQ(out.str(),
              "alone;m:root/0;m:leaf/2 1\n"
              "{ch,...} (3 processes);{ch,1};m:root/0;m:leaf/2 3\n"
              "{ch,...} (3 processes);{ch,2} (2 processes);m:root/0;m:leaf/2 6\n");
}

// -e alloc: each heap's samples scaled to its exact words; a heap no sample came from keeps its
// words under its process; samples of a heap with no exact words keep their weights.
TEST(AllocStrata, EachHeapScaledToItsExactWords) {
    Fixture f;
    const uint64_t a_pid = 0x113, b_pid = 0x223, c_pid = 0x333, d_pid = 0x443;
    const uint32_t unsampled = f.frames.other(FrameKind::vm, "[allocation not sampled]", "beam.smp");
    bb::AllocStrata s;
    // A: 3:1 by its samples, 2,000 exact words (its epochs lost half the watches).
    s.exact(a_pid, 1500);
    s.exact(a_pid, 500);
    s.sample(a_pid, std::vector<uint32_t>{f.root, f.leaf}, 600, {a_pid, 1});
    s.sample(a_pid, std::vector<uint32_t>{f.root, f.mid}, 200, {a_pid, 1});
    // B's heap: a message copied in by A (the writer keeps the stack), 50 exact words.
    s.exact(b_pid, 50);
    s.sample(b_pid, std::vector<uint32_t>{f.root, f.native}, 100, {a_pid, 1});
    s.exact(c_pid, 70);                                                      // no sample
    s.sample(d_pid, std::vector<uint32_t>{f.root, f.leaf}, 30, {d_pid, 2});  // no exact words yet
    EXPECT_FALSE(s.empty());
    Aggregator agg;
    s.drain_into(agg, unsampled);
    EXPECT_TRUE(s.empty());
    EXPECT_EQ(agg.total(), 2000u + 50 + 70 + 30);
    std::map<std::pair<std::string, std::string>, uint64_t> got;  // (leaf, pid) -> words
    bb::ProfileMeta m;
    m.pid_text = [](uint64_t pid) { return std::to_string(pid); };
    bb::Profile p = agg.profile(f.frames, m);
    for (const auto& sm : p.samples) got[{p.functions[p.locations[sm.stack.back()].function].name, sm.pid}] += sm.count;
    EXPECT_EQ((got[{"m:leaf/2", std::to_string(a_pid)}]), 1500u);
    EXPECT_EQ((got[{"m:mid/1", std::to_string(a_pid)}]), 500u);
    EXPECT_EQ((got[{"memcpy", std::to_string(a_pid)}]), 50u);  // B's words, A's stack
    EXPECT_EQ((got[{"[allocation not sampled]", std::to_string(c_pid)}]), 70u);
    EXPECT_EQ((got[{"m:leaf/2", std::to_string(d_pid)}]), 30u);
    EXPECT_EQ(got.size(), 5u);
}

// Heaps under the period that collected are pooled by kind: their samples scaled to the pool's
// exact words, whatever heap of the kind they came from. A heap at or over the period, one of no
// known kind, and one whose words came only from its exit (its first epoch, never sampled) keep
// their own strata; a pool with no sample leaves each heap's words under it.
TEST(AllocStrata, SmallHeapsPooledByKind) {
    Fixture f;
    const uint32_t unsampled = f.frames.other(FrameKind::vm, "[allocation not sampled]", "beam.smp");
    const uint64_t kWorker = 0x1234, kLonely = 0x5678, exit_ip = 0x4000;
    bb::AllocStrata s(1000, {exit_ip});
    const std::vector<uint32_t> leaf{f.root, f.leaf}, mid{f.root, f.mid};
    // Ten short workers of 300 words each; two were sampled (3:1 between them), eight not.
    for (uint64_t k = 0; k < 10; k++) s.exact(0x1003 + (k << 4), 300, kWorker);
    s.sample(0x1003, leaf, 1000, {0x1003, 1});
    s.sample(0x1013, mid, 1000, {0x1013, 1});
    s.sample(0x1013, leaf, 1000, {0x1013, 1});
    s.sample(0x1013, leaf, 1000, {0x1013, 1});
    // A long process of the same kind, over the period: its own stratum, exact.
    s.exact(0x2003, 5000, kWorker);
    s.sample(0x2003, mid, 1000, {0x2003, 2});
    // A worker that ended without collecting: its words are its exit's only.
    s.exact(0x3003, 200, kWorker, exit_ip);
    // Unknown kind, and a kind with no sample: their own words, unsampled.
    s.exact(0x4003, 100, 0);
    s.exact(0x5003, 400, kLonely);
    s.exact(0x5013, 100, kLonely);
    Aggregator agg;
    s.drain_into(agg, unsampled);
    EXPECT_EQ(agg.total(), 3000u + 5000 + 200 + 100 + 500);
    std::map<std::string, uint64_t> by_leaf;
    std::map<std::pair<std::string, std::string>, uint64_t> got;
    bb::ProfileMeta m;
    m.pid_text = [](uint64_t pid) { return std::to_string(pid); };
    bb::Profile p = agg.profile(f.frames, m);
    for (const auto& sm : p.samples) {
        const std::string leaf_name = p.functions[p.locations[sm.stack.back()].function].name;
        got[{leaf_name, sm.pid}] += sm.count;
        by_leaf[leaf_name] += sm.count;
    }
    // The pool: 3,000 words split 3:1 by its four samples, charged to the two sampled workers.
    EXPECT_EQ(by_leaf["m:leaf/2"], 2250u);
    EXPECT_EQ(by_leaf["m:mid/1"], 750u + 5000);
    EXPECT_EQ((got[{"m:mid/1", std::to_string(0x2003)}]), 5000u);
    EXPECT_EQ((got[{"[allocation not sampled]", std::to_string(0x3003)}]), 200u);
    EXPECT_EQ((got[{"[allocation not sampled]", std::to_string(0x4003)}]), 100u);
    EXPECT_EQ((got[{"[allocation not sampled]", std::to_string(0x5003)}]), 400u);
    EXPECT_EQ((got[{"[allocation not sampled]", std::to_string(0x5013)}]), 100u);
    EXPECT_EQ(by_leaf["[allocation not sampled]"], 800u);

    // With no period (-e alloc-gc, or an older caller) nothing is pooled: as before.
    bb::AllocStrata plain;
    plain.exact(0x1003, 300, kWorker);
    plain.exact(0x1013, 300, kWorker);
    plain.sample(0x1003, leaf, 1000, {0x1003, 1});
    Aggregator agg2;
    plain.drain_into(agg2, unsampled);
    EXPECT_EQ(agg2.total(), 600u);
    bb::Profile p2 = agg2.profile(f.frames, m);
    uint64_t unsampled_words = 0;
    for (const auto& sm : p2.samples)
        if (p2.functions[p2.locations[sm.stack.back()].function].name == "[allocation not sampled]")
            unsampled_words += sm.count;
    EXPECT_EQ(unsampled_words, 300u);
}

TEST(Names, CxxSymbolsDemangledWithoutParameters) {
    EXPECT_EQ(bb::short_demangled("_Z17beam_jit_call_bifP7processPmPKvPFmS0_S1_S3_Em"), "beam_jit_call_bif");
    EXPECT_EQ(bb::short_demangled("_ZNK3foo3barEv"), "foo::bar");
    EXPECT_EQ(bb::short_demangled("erts_garbage_collect_nobump"), "erts_garbage_collect_nobump");
    EXPECT_EQ(bb::short_demangled("_Zgarbage"), "_Zgarbage");
    bb::FrameTable t;
    auto id = t.other(bb::FrameKind::native, "_ZNK3foo3barEv", "beam.smp");
    EXPECT_EQ(t.function(id).name, "foo::bar");
    EXPECT_EQ(t.function(id).system_name, "_ZNK3foo3barEv");
}

TEST(Names, ElixirModulesAsElixirWritesThem) {
    EXPECT_EQ(bb::display_name("'Elixir.MyApp.Repo':all/2"), "MyApp.Repo.all/2");
    EXPECT_EQ(bb::display_name("'Elixir.MyApp':'-run/1-fun-0-'/1"), "anonymous fn/1 in MyApp.run/1");
    EXPECT_EQ(bb::display_name("'Elixir.Enum':'reduce_range'/5"), "Enum.reduce_range/5");
    EXPECT_EQ(bb::display_name("'Elixir.Kernel':'=='/2"), "Kernel.==/2");
    // The JIT's pseudo-ranges of a module (a sample can land in them) name it the same way.
    EXPECT_EQ(bb::display_name("Elixir.Enum::codeHeader"), "Enum::codeHeader");
    EXPECT_EQ(bb::display_name("'Elixir.Enum'::codeHeader"), "Enum::codeHeader");
    EXPECT_EQ(bb::display_name("'Elixir.Enum':take/2-CodeInfoPrologue"), "Enum.take/2-CodeInfoPrologue");
    EXPECT_EQ(bb::display_name("lists::codeHeader"), "lists::codeHeader");
    EXPECT_EQ(bb::display_name("lists:keyfind/3-CodeInfoPrologue"), "lists:keyfind/3-CodeInfoPrologue");
    EXPECT_EQ(bb::display_name("Elixir.::codeHeader"), "Elixir.::codeHeader");
    // Erlang stays as the VM writes it, quotes and all.
    EXPECT_EQ(bb::display_name("lists:foldl/3"), "lists:foldl/3");
    EXPECT_EQ(bb::display_name("m:'-f/0-fun-0-'/0"), "m:'-f/0-fun-0-'/0");
    EXPECT_EQ(bb::display_name("'a\\'b':c/0"), "'a\\'b':c/0");
    // Whatever does not parse is shown as it is.
    for (const char* odd : {"", "'Elixir.X", "'Elixir.X':f", "'Elixir.X':f/x", "'Elixir.X'f/1", ":/", "[kernel]"})
        EXPECT_EQ(bb::display_name(odd), odd);
    bb::FrameTable raw(true), nice;
    EXPECT_EQ(raw.function(raw.erlang("'Elixir.A':b/0", "Elixir.A", nullptr, 0, 0)).name, "'Elixir.A':b/0");
    EXPECT_EQ(nice.function(nice.erlang("'Elixir.A':b/0", "Elixir.A", nullptr, 0, 0)).name, "A.b/0");
    EXPECT_EQ(nice.function(nice.erlang("'Elixir.A':b/0", "Elixir.A", nullptr, 0, 0)).system_name, "'Elixir.A':b/0");
    // A sample in a module's header is VM code of that module, named as its functions are.
    const auto& header = nice.function(nice.erlang("Elixir.Enum::codeHeader", "Elixir.Enum", nullptr, 0, 0));
    EXPECT_EQ(header.name, "Enum::codeHeader");
    EXPECT_EQ(header.kind, FrameKind::vm);
    EXPECT_EQ(nice.function(nice.erlang("global::call_nif_shared", "global", nullptr, 0, 0)).name,
              "global::call_nif_shared");
}

TEST(PidTerm, FormatAndParseRoundTripPerRelease) {
    const bb::PidLayout otp25{28, 15, false}, otp27{60, 28, true};
    for (uint64_t num : {0ull, 1ull, 85ull, 0x7fffull})
        for (uint64_t ser : {0ull, 3ull, 0x1fffull}) {
            // OTP 25: 28 bits of data in the low word; the high half is the table index.
            uint64_t low = ((ser << 15 | num) << 4) | 0x3;
            uint64_t term = (uint64_t{1234} << 32) | low;
            std::string text = otp25.format(term);
            EXPECT_EQ(text, "<0." + std::to_string(num) + "." + std::to_string(ser) + ">");
            auto back = otp25.parse(text);
            ASSERT_TRUE(back);
            EXPECT_EQ(*back, low);
            EXPECT_EQ(term & otp25.mask(), low);
        }
    // OTP 27: 60 bits of data, 28 of them the number; with no permutation the term is the data.
    uint64_t term27 = ((uint64_t{5} << 28 | 300000) << 4) | 0x3;
    EXPECT_EQ(otp27.format(term27), "<0.300000.5>");
    EXPECT_EQ(otp27.parse("<0.300000.5>"), term27);
    // With the process table's permutation (as a 2^20-slot table sets it up: the low bits of
    // the number choose the cache line), format and parse are inverses, and <0.0.0> stays 0x3.
    const bb::PidPix pix{0xfffff, 0x7, 0x1ffff, 17, 3};
    for (uint64_t num : {0ull, 1ull, 83ull, 84ull, 99999ull, 0xfffffull, 0xfffffffull})
        for (uint64_t ser : {0ull, 1ull, 77ull}) {
            std::string text = "<0." + std::to_string(num) + "." + std::to_string(ser) + ">";
            auto term = otp27.parse(text, pix);
            ASSERT_TRUE(term) << text;
            EXPECT_EQ(otp27.format(*term, pix), text);
        }
    EXPECT_EQ(otp27.parse("<0.0.0>", pix), 0x3u);
    EXPECT_NE(otp27.parse("<0.83.0>", pix), otp27.parse("<0.83.0>"));  // 83's low bits move
    EXPECT_FALSE(otp25.parse("<0.300000.5>"));
    for (const char* bad : {"", "<0.1>", "<1.2.3>", "<0.99999.0>", "0.1.2", "<0.1.2>x", "<0.-1.0>"})
        EXPECT_FALSE(otp25.parse(bad)) << bad;
}

}  // namespace
