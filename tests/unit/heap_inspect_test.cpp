// The heap inspector's pure parts on hand-made snapshots: reads bounded to the copied areas, and
// the root set read off a stack laid out as the JIT lays it out (Y registers, continuation
// pointers, saved frame pointers, catches); garbage stacks never crash it.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <random>

#include "inspect/heap_inspect.hpp"

namespace {

using bb::HeapSnapshot;
using bb::Root;
namespace term = bb::term;

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

// A heap built word by word at 0x100000, as one copied area.
struct Image {
    static constexpr uint64_t kBase = 0x100000;
    std::vector<uint64_t> words;
    uint64_t at() const { return kBase + 8 * words.size(); }
    uint64_t cons(uint64_t head, uint64_t tail) {
        uint64_t p = at();
        words.push_back(head);
        words.push_back(tail);
        return p + 1;
    }
    uint64_t tuple(std::initializer_list<uint64_t> es) {
        uint64_t p = at();
        words.push_back(term::tuple_header(es.size()));
        words.insert(words.end(), es);
        return p + 2;
    }
    static uint64_t small(int64_t v) { return static_cast<uint64_t>(v) << 4 | 0xf; }
    static uint64_t atom(uint64_t ix) { return ix << 6 | 0x0b; }
    HeapSnapshot snapshot() const {
        HeapSnapshot s;
        s.areas.push_back(area(kBase, words));
        return s;
    }
};

term::TermSource source(const HeapSnapshot& s) {
    term::TermSource src;
    src.read = [&s](uint64_t addr, std::span<std::byte> dst) { return s.read(addr, dst); };
    src.atom_text = [](uint64_t a) -> std::optional<std::string> { return "k" + std::to_string(term::atom_index(a)); };
    src.pid_text = [](uint64_t) { return std::string("<0.1.0>"); };
    return src;
}

std::vector<Root> dictionary_roots(const HeapSnapshot& s) {
    return bb::root_set(s, "f/0", [](uint64_t) { return std::string("g/1"); });
}

// The case of issue 20: 3,000 dictionary values that are one 100,000-element list. Each root's
// flat size is the list's (as erts_debug:flat_size/1 has it), the list is walked once (it took
// 13.5 s sized root by root), and the rows fold into one.
TEST(HeapInspect, ASharedListIsWalkedOnce) {
    Image h;
    h.words.reserve(2 * 100'000 + 3 * 3'000 + 16);
    uint64_t list = term::kNil;
    for (int i = 0; i < 100'000; i++) list = h.cons(Image::small(i), list);
    uint64_t own = h.tuple({Image::small(1), Image::small(2)});
    HeapSnapshot s = h.snapshot();
    for (uint64_t k = 0; k < 3'000; k++) s.dictionary.emplace_back(Image::atom(k + 1), list);
    s.dictionary.emplace_back(Image::atom(9'999), own);
    auto src = source(s);
    auto roots = dictionary_roots(s);
    ASSERT_EQ(roots.size(), 3'001u);
    auto t0 = std::chrono::steady_clock::now();
    bb::RootSizes sizes = bb::size_roots(s, src, roots);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::cout << "[          ] 3,000 roots sharing a 100,000-element list sized in " << secs << " s\n";
    EXPECT_TRUE(sizes.partial.empty()) << sizes.partial;
    for (size_t i = 0; i < 3'000; i++) ASSERT_EQ(roots[i].size->words, 200'000u) << i;
    EXPECT_EQ(roots[3'000].size->words, 3u);
    EXPECT_EQ(roots[0].distinct_words, 200'000u);
    EXPECT_EQ(roots[1].distinct_words, 0u);
    EXPECT_EQ(sizes.distinct_words[static_cast<int>(Root::Kind::Dictionary)], 200'003u);

    auto rows = bb::fold_shared(roots);
    ASSERT_EQ(rows.size(), 2u);
    EXPECT_EQ(rows[0].sharers, 2'999u);
    ASSERT_EQ(rows[0].first_sharers.size(), 3u);
    EXPECT_EQ(rows[0].first_sharers[0].key, Image::atom(2));
    EXPECT_EQ(rows[1].sharers, 0u);
}

// Immediates are not folded: many roots holding [] or 0 are separate rows.
TEST(HeapInspect, ImmediatesAreNotFolded) {
    std::vector<Root> roots(3);
    for (auto& r : roots) r.term = term::kNil;
    EXPECT_EQ(bb::fold_shared(roots).size(), 3u);
}

// Memory that is not a heap: a cons cell whose tail is itself, a tuple that holds itself, and a
// loop through two shared cells. Each root ends (malformed: no size), the others still size.
TEST(HeapInspect, LoopsEndWithoutASize) {
    Image h;
    uint64_t self_cons = h.at() + 1;
    h.cons(Image::small(1), self_cons);
    uint64_t self_tuple = h.at() + 2;
    h.tuple({Image::small(7), self_tuple});
    // a -> b -> a, each also held by a root of its own.
    uint64_t a = h.at() + 1, b = a + 16;
    h.cons(Image::small(1), b);
    h.cons(Image::small(2), a);
    uint64_t fine = h.tuple({Image::small(1)});
    HeapSnapshot s = h.snapshot();
    s.messages = {self_cons, self_tuple, a, b, fine, a};
    auto src = source(s);
    auto roots = dictionary_roots(s);
    bb::RootSizes sizes = bb::size_roots(s, src, roots);
    EXPECT_TRUE(sizes.partial.empty()) << sizes.partial;
    for (int i : {0, 1, 2, 3, 5}) EXPECT_FALSE(roots[i].size) << i;
    ASSERT_TRUE(roots[4].size);
    EXPECT_EQ(roots[4].size->words, 2u);
}

// A budget too small for the heap: a partial result that says so, never a long walk.
TEST(HeapInspect, BudgetSpentIsPartial) {
    Image h;
    uint64_t list = term::kNil;
    for (int i = 0; i < 10'000; i++) list = h.cons(Image::small(i), list);
    HeapSnapshot s = h.snapshot();
    s.messages = {list, list};
    auto src = source(s);
    auto roots = dictionary_roots(s);
    bb::RootSizes sizes = bb::size_roots(s, src, roots, {.max_reads = 1'000});
    EXPECT_NE(sizes.partial.find("reads of the copy spent"), std::string::npos) << sizes.partial;
    EXPECT_FALSE(roots[0].size);
}

// A dictionary bucket (a list of {Key, Value}) whose tail is itself, or leads back into it: each
// pair once, and the reading ends.
TEST(HeapInspect, SelfTailedDictionaryBucketEnds) {
    Image h;
    uint64_t p1 = h.tuple({Image::atom(1), Image::small(10)}), p2 = h.tuple({Image::atom(2), Image::small(20)});
    uint64_t self_bucket = h.at() + 1;
    h.cons(p1, self_bucket);
    uint64_t c = h.at() + 1, d = c + 16;
    h.cons(p1, d);
    h.cons(p2, c);
    HeapSnapshot s = h.snapshot();
    bb::dictionary_pairs(s, {self_bucket});
    ASSERT_EQ(s.dictionary.size(), 1u);
    EXPECT_EQ(s.dictionary[0].second, Image::small(10));
    s.dictionary.clear();
    bb::dictionary_pairs(s, {c});
    ASSERT_EQ(s.dictionary.size(), 2u);
}

}  // namespace
