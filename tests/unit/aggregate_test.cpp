// Aggregation: self/total shares, recursion counted once per sample, folded output, and the
// pid-term text both tools print and parse.
#include <gtest/gtest.h>

#include "release.hpp"

#include <sstream>

#include "aggregate.hpp"
#include "cli.hpp"
#include "vm.hpp"

namespace {

using bb::Aggregator;
using bb::NameTable;

struct Fixture {
    NameTable names;
    uint32_t root = names.intern("m:root/0", true), mid = names.intern("m:mid/1", true),
             leaf = names.intern("m:leaf/2", true), native = names.intern("memcpy"),
             shared = names.intern("global::i_test_yield_shared", false);
};

TEST(Aggregate, SelfAndTotal) {
    Fixture f;
    Aggregator a;
    a.add(std::vector<uint32_t>{f.root, f.mid, f.leaf}, 6);
    a.add(std::vector<uint32_t>{f.root, f.mid}, 3);
    a.add(std::vector<uint32_t>{f.root, f.native}, 1);
    EXPECT_EQ(a.total(), 10u);
    EXPECT_EQ(a.unique_stacks(), 3u);
    auto rows = a.ranked(f.names, 0);
    ASSERT_EQ(rows.size(), 4u);
    EXPECT_EQ(rows[0].id, f.leaf);
    EXPECT_EQ(rows[0].self, 6u);
    EXPECT_EQ(rows[0].total, 6u);
    EXPECT_EQ(rows[1].id, f.mid);
    EXPECT_EQ(rows[1].self, 3u);
    EXPECT_EQ(rows[1].total, 9u);
    EXPECT_EQ(rows[2].id, f.native);
    EXPECT_EQ(rows[3].id, f.root);
    EXPECT_EQ(rows[3].self, 0u);
    EXPECT_EQ(rows[3].total, 10u);
    EXPECT_EQ(a.ranked(f.names, 2).size(), 2u);
    EXPECT_EQ(a.ranked(f.names, 1, true).front().id, f.root);
}

TEST(Aggregate, RecursionCountsOncePerSample) {
    Fixture f;
    Aggregator a;
    a.add(std::vector<uint32_t>{f.root, f.mid, f.mid, f.mid, f.leaf}, 4);
    auto rows = a.ranked(f.names, 0, true);
    for (const auto& r : rows) EXPECT_LE(r.total, 4u) << f.names.name(r.id);
}

TEST(Aggregate, SameStackMerges) {
    Fixture f;
    Aggregator a;
    for (int i = 0; i < 1000; i++) a.add(std::vector<uint32_t>{f.root, f.leaf});
    EXPECT_EQ(a.unique_stacks(), 1u);
    EXPECT_EQ(a.total(), 1000u);
    a.add(std::vector<uint32_t>{}, 5);  // nothing left to show: not a sample
    EXPECT_EQ(a.total(), 1000u);
}

TEST(Aggregate, FoldedIsRootFirstSortedAndParseable) {
    Fixture f;
    Aggregator a;
    a.add(std::vector<uint32_t>{f.root, f.mid, f.leaf}, 2);
    a.add(std::vector<uint32_t>{f.root, f.native}, 7);
    std::ostringstream out;
    a.write_folded(out, f.names);
    EXPECT_EQ(out.str(), "m:root/0;m:mid/1;m:leaf/2 2\nm:root/0;memcpy 7\n");
}

TEST(Aggregate, ErlangOnlyTableDropsNativeAndSharedCode) {
    Fixture f;
    Aggregator a;
    a.add(std::vector<uint32_t>{f.root, f.native}, 5);
    a.add(std::vector<uint32_t>{f.root, f.shared}, 5);
    std::ostringstream out;
    a.write_top(out, f.names, 0, true, true);
    EXPECT_NE(out.str().find("m:root/0"), std::string::npos);
    EXPECT_EQ(out.str().find("memcpy"), std::string::npos);
    EXPECT_EQ(out.str().find("global::"), std::string::npos);
    EXPECT_NE(out.str().find("100.0"), std::string::npos);  // root: in every sample
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
