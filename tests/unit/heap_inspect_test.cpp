// The heap inspector's pure parts on hand-made snapshots: reads bounded to the copied areas, and
// the root set read off a stack laid out as the JIT lays it out (Y registers, continuation
// pointers, saved frame pointers, catches); garbage stacks never crash it.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "inspect/heap_inspect.hpp"

namespace {

using bb::HeapSnapshot;
using bb::Root;

HeapSnapshot::Area area(uint64_t addr, std::vector<uint64_t> words) {
    HeapSnapshot::Area a{addr, std::vector<std::byte>(8 * words.size())};
    std::memcpy(a.bytes.data(), words.data(), a.bytes.size());
    return a;
}

TEST(HeapInspect, ReadsOnlyWhatWasCopied) {
    HeapSnapshot s;
    s.areas.push_back(area(0x1000, {1, 2, 3}));
    s.areas.push_back(area(0x2000, {4}));
    uint64_t w = 0;
    auto word = std::as_writable_bytes(std::span(&w, 1));
    EXPECT_TRUE(s.read(0x1008, word));
    EXPECT_EQ(w, 2u);
    EXPECT_TRUE(s.read(0x2000, word));
    EXPECT_EQ(w, 4u);
    EXPECT_FALSE(s.read(0x1014, word));  // runs past the area's end
    EXPECT_FALSE(s.read(0x0ff8, word));  // before the first
    EXPECT_FALSE(s.read(0x1800, word));  // between areas
    EXPECT_FALSE(s.read(~0ull - 3, word));
    EXPECT_EQ(s.bytes_copied(), 32u);
}

TEST(HeapInspect, RootSetFromTheStack) {
    HeapSnapshot s;
    s.stop = 0x8000;
    s.hend = 0x8000 + 8 * 8;
    const uint64_t cp1 = 0x55550000, cp2 = 0x55560000, catch_tag = 5ull << 6 | 0x1b;
    // The running function's y0, y1; a saved frame pointer and the return into f1; f1's y0 and
    // a catch (y1); the return into f2, whose frame is empty.
    s.stack = {0x3b, 0x1f, s.stop + 48, cp1, 0x2f, catch_tag, cp2, 0x4b};
    s.dictionary = {{0x10b, 0x5f}};
    s.messages = {0x3f, 0x4f};
    auto roots = bb::root_set(s, "f0/0", [&](uint64_t cp) { return cp == cp1 ? "f1/1" : cp == cp2 ? "f2/2" : "?"; });
    ASSERT_EQ(roots.size(), 7u);
    EXPECT_EQ(roots[0].where, "y0");
    EXPECT_EQ(roots[0].function, "f0/0");
    EXPECT_EQ(roots[1].where, "y1");
    EXPECT_EQ(roots[2].where, "y0");
    EXPECT_EQ(roots[2].function, "f1/1");
    EXPECT_EQ(roots[2].term, 0x2fu);
    EXPECT_EQ(roots[3].function, "f2/2");  // the catch in f1's y1 is not listed
    EXPECT_EQ(roots[3].where, "y0");
    EXPECT_EQ(roots[4].kind, Root::Kind::Dictionary);
    EXPECT_EQ(roots[4].key, 0x10bu);
    EXPECT_EQ(roots[6].where, "#2");
}

TEST(HeapInspect, GarbageStacksNeverCrash) {
    std::mt19937_64 rng(11);
    for (int round = 0; round < 500; round++) {
        HeapSnapshot s;
        s.stop = 0x8000;
        s.hend = 0x8000 + 8 * 64;
        for (int i = 0; i < 64; i++) s.stack.push_back(i % 3 ? rng() : s.stop + 8 * (rng() % 80));
        auto roots = bb::root_set(s, "f/0", [](uint64_t) { return std::string("g/1"); });
        EXPECT_LE(roots.size(), s.stack.size());
    }
}

}  // namespace
