// The term printer on terms laid out by hand as the VM lays them out, in a buffer that stands
// for the target's memory: what it prints, and that garbage never makes it crash or loop.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "inspect/term_size.hpp"
#include "inspect/terms.hpp"

namespace {

using namespace bb::term;

// Target memory: words at kBase onwards.
constexpr uint64_t kBase = 0x7f0000100000;

struct Heap {
    std::vector<uint64_t> words;
    std::map<uint64_t, std::string> atoms;  // index -> text

    uint64_t atom(const std::string& text) {
        uint64_t ix = atoms.size() + 1;
        atoms[ix] = text;
        return ix << 6 | 0x0b;
    }
    static uint64_t small(int64_t v) { return static_cast<uint64_t>(v) << 4 | 0xf; }
    uint64_t at() const { return kBase + 8 * words.size(); }
    uint64_t tuple(std::initializer_list<uint64_t> elements) {
        uint64_t p = at();
        words.push_back(tuple_header(elements.size()));
        words.insert(words.end(), elements);
        return p + 2;
    }
    uint64_t cons(uint64_t head, uint64_t tail) {
        uint64_t p = at();
        words.push_back(head);
        words.push_back(tail);
        return p + 1;
    }
    uint64_t string(const std::string& s) {
        uint64_t t = kNil;
        for (auto c = s.rbegin(); c != s.rend(); ++c) t = cons(small(*c), t);
        return t;
    }
    uint64_t binary(const std::string& bytes, bool heap_bits) {
        uint64_t p = at();
        size_t data_words = (bytes.size() + 7) / 8;
        words.push_back((1 + data_words) << 6 | (heap_bits ? 0x20 : 0x24));
        words.push_back(heap_bits ? bytes.size() * 8 : bytes.size());
        size_t first = words.size();
        words.resize(words.size() + data_words);
        std::memcpy(&words[first], bytes.data(), bytes.size());
        return p + 2;
    }

    TermSource source(bool heap_bits = false) const {
        TermSource s;
        s.read = [this](uint64_t addr, std::span<std::byte> dst) {
            if (addr < kBase || addr - kBase + dst.size() > 8 * words.size() || addr + dst.size() < addr) return false;
            if (dst.empty()) return true;
            std::memcpy(dst.data(), reinterpret_cast<const char*>(words.data()) + (addr - kBase), dst.size());
            return true;
        };
        s.atom_text = [this](uint64_t a) -> std::optional<std::string> {
            auto it = atoms.find(atom_index(a));
            if (it == atoms.end()) return std::nullopt;
            return it->second;
        };
        s.pid_text = [](uint64_t p) { return "<0." + std::to_string(p >> 4) + ".0>"; };
        s.layout = heap_bits ? bb::kTerms27 : bb::kTerms25;
        return s;
    }
};

TEST(Terms, PrintsAsErlangDoes) {
    for (bool heap_bits : {false, true}) {
        Heap h;
        h.words.reserve(256);  // addresses are taken as the terms are built
        uint64_t label = h.tuple({h.atom("conn"), Heap::small(-7), h.string("ab\"c"), h.binary("db", heap_bits),
                                  h.atom("Elixir.MyApp"), 0x853, kNil});
        EXPECT_EQ(text(h.source(heap_bits), label), R"({conn,-7,"ab\"c",<<"db">>,'Elixir.MyApp',<0.133.0>,[]})");
        uint64_t list = h.cons(Heap::small(1), h.cons(h.atom("end"), Heap::small(3)));  // improper
        EXPECT_EQ(text(h.source(heap_bits), list), "[1,'end'|3]");
        EXPECT_EQ(text(h.source(heap_bits), h.binary(std::string("\x01\x02", 2), heap_bits)), "<<1,2>>");
    }
}

TEST(Terms, BinariesOfTheOtherReleaseAreNotRead) {
    Heap h;
    uint64_t b = h.binary("db", /*heap_bits=*/true);
    EXPECT_NE(text(h.source(false), b), "<<\"db\">>");  // OTP 25's subtag 0x8 is a ProcBin
}

TEST(Terms, LongAndDeepAndCyclicTermsStop) {
    Heap h;
    h.words.reserve(4096);
    EXPECT_EQ(text(h.source(), h.string(std::string(200, 'x')), {.max_chars = 10}), "\"xxxxxxxxx...");
    uint64_t deep = h.atom("leaf");
    for (int i = 0; i < 20; i++) deep = h.tuple({deep});
    EXPECT_EQ(text(h.source(), deep, {.depth = 7}), "{{{{{{{...}}}}}}}");
    EXPECT_EQ(text(h.source(), deep, {.max_chars = 200}), std::string(20, '{') + "leaf" + std::string(20, '}'));
    // A cons cell whose tail is itself: an endless list in memory that changed under us.
    uint64_t cell = h.at() + 1;
    h.words.push_back(Heap::small(1));
    h.words.push_back(cell);
    auto looped = text(h.source(), cell, {.max_chars = 1000});
    ASSERT_TRUE(looped);
    EXPECT_TRUE(looped->starts_with("[1,1,1,") && looped->ends_with("...")) << *looped;  // out of reads
    EXPECT_FALSE(flat_size(h.source(), cell, 10000));                                    // endless: over the budget
}

TEST(Terms, UnreadableOrMalformedIsNothing) {
    Heap h;
    EXPECT_EQ(text(h.source(), kBase + 8 * 1000 + 2), std::nullopt);  // boxed, outside memory
    EXPECT_EQ(text(h.source(), 99ull << 6 | 0x0b), std::nullopt);     // an atom the table lacks
    h.words.push_back(0x3);                                           // a header with bad tag bits
    EXPECT_EQ(text(h.source(), kBase + 2), std::nullopt);
}

TEST(Terms, GarbageNeverCrashes) {
    std::mt19937_64 rng(7);
    for (int round = 0; round < 2000; round++) {
        Heap h;
        for (int i = 0; i < 64; i++) {
            uint64_t w = rng();
            // Many words point back into the buffer, with every tag.
            if (i % 2) w = kBase + 8 * (rng() % 64) + (rng() % 4);
            h.words.push_back(w);
        }
        for (int i = 0; i < 8; i++) h.atoms[i] = "a";
        TermSource src = h.source(round % 2);
        src.read_off_heap = src.read;
        (void)text(src, h.words[rng() % 64], {.max_chars = 200, .max_reads = 1000});
        (void)flat_size(src, h.words[rng() % 64], 10000);
    }
}

// ~P's depth: elements count as levels too.
TEST(Terms, DepthAsIoLibCountsIt) {
    Heap h;
    h.words.reserve(256);
    uint64_t list = kNil;
    for (int i = 5; i >= 1; i--) list = h.cons(Heap::small(i), list);
    EXPECT_EQ(text(h.source(), list, {.depth = 3}), "[1,2|...]");
    EXPECT_EQ(text(h.source(), list, {.depth = 1}), "[...]");
    EXPECT_EQ(text(h.source(), list), "[1,2,3,4,5]");
    uint64_t t = h.tuple({h.atom("a"), h.atom("b"), h.atom("c"), h.atom("d")});
    EXPECT_EQ(text(h.source(), t, {.depth = 3}), "{a,b,...}");
}

// Maps, floats and bignums as ~p prints them, and flat sizes as erts_debug:flat_size/1 counts
// them (figures from OTP 25 and 27 for the same terms).
TEST(Terms, MapsFloatsBignumsAndSizes) {
    for (bool otp27 : {false, true}) {
        Heap h;
        h.words.reserve(256);
        uint64_t keys = h.tuple({h.atom("a"), h.atom("b")});
        uint64_t two = h.cons(Heap::small(2), kNil);
        uint64_t map = h.at() + 2;  // flatmap: header, size, keys, values
        h.words.insert(h.words.end(), {uint64_t{1} << 8 | (otp27 ? 0x2cu : 0x3cu), 2, keys, Heap::small(1), two});
        EXPECT_EQ(text(h.source(otp27), map), "#{a => 1,b => [2]}");
        EXPECT_EQ(flat_size(h.source(otp27), map)->words, 10u);  // #{a => 1, b => [2]}
        uint64_t f = h.at() + 2;
        h.words.insert(h.words.end(), {1u << 6 | 0x18u, std::bit_cast<uint64_t>(3.14)});
        EXPECT_EQ(text(h.source(otp27), f), "3.14");
        EXPECT_EQ(flat_size(h.source(otp27), f)->words, 2u);
        // Not a float Erlang has: a NaN or an infinity is memory that is not a float
        // (fuzz_terms found the printer throwing on one).
        uint64_t nan = h.at() + 2;
        h.words.insert(h.words.end(), {1u << 6 | 0x18u, 0x7ff8000000000000ull});
        EXPECT_EQ(text(h.source(otp27), nan), std::nullopt);
        uint64_t small_f = h.at() + 2;
        h.words.insert(h.words.end(), {1u << 6 | 0x18u, std::bit_cast<uint64_t>(1.0e-7)});
        EXPECT_EQ(text(h.source(otp27), small_f), "1.0e-7");
        uint64_t big = h.at() + 2;  // -(2^70): two digits, negative
        h.words.insert(h.words.end(), {2u << 6 | 0x0cu, 0, 64});
        EXPECT_EQ(text(h.source(otp27), big), "-1180591620717411303424");
        EXPECT_EQ(flat_size(h.source(otp27), big)->words, 3u);
        uint64_t both = h.tuple({map, f, big, h.binary("abc", otp27)});
        EXPECT_EQ(flat_size(h.source(otp27), both)->words, 5u + 10 + 2 + 3 + 3);
    }
}

// The same terms as Elixir's inspect/1 writes them (procs --inspect of an Elixir process):
// checked against `elixir -e 'IO.inspect(...)'` on Debian's Elixir 1.14, but for charlists,
// written ~c"..." as Elixir 1.15 and later write them (1.14: 'ab"c'), and structs, written
// %Shop.Item{...} as when their module is loaded (here it is not: %{__struct__: Shop.Item, ...}).
TEST(Terms, PrintsAsElixirDoes) {
    for (bool heap_bits : {false, true}) {
        Heap h;
        h.words.reserve(512);
        const Limits ex{.max_chars = 200, .syntax = Syntax::elixir};
        auto src = h.source(heap_bits);
        uint64_t label = h.tuple({h.atom("conn"), Heap::small(-7), h.string("ab\"c"), h.binary("d#{b}", heap_bits),
                                  h.atom("Elixir.MyApp.Repo"), 0x853, kNil, h.atom("nil"), h.atom("with space")});
        EXPECT_EQ(text(h.source(heap_bits), label, ex),
                  R"({:conn, -7, ~c"ab\"c", "d\#{b}", MyApp.Repo, #PID<0.133.0>, [], nil, :"with space"})");
        uint64_t list = h.cons(Heap::small(1), h.cons(h.atom("end"), Heap::small(3)));  // improper
        EXPECT_EQ(text(src, list, ex), "[1, :end | 3]");
        EXPECT_EQ(text(src, h.binary(std::string("\x01\x02", 2), heap_bits), ex), "<<1, 2>>");
        uint64_t kw = h.cons(h.tuple({h.atom("timeout"), Heap::small(5000)}),
                             h.cons(h.tuple({h.atom("name"), h.atom("x")}), kNil));
        EXPECT_EQ(text(src, kw, ex), "[timeout: 5000, name: :x]");
        // A map of atom keys, and a struct: its __struct__ key names it.
        uint64_t keys = h.tuple({h.atom("a"), h.atom("b")});
        uint64_t map = h.at() + 2;
        h.words.insert(h.words.end(), {uint64_t{1} << 8 | (heap_bits ? 0x2cu : 0x3cu), 2, keys, Heap::small(1), kw});
        EXPECT_EQ(text(src, map, ex), "%{a: 1, b: [timeout: 5000, name: :x]}");
        uint64_t skeys = h.tuple({h.atom("__struct__"), h.atom("name")});
        uint64_t item = h.atom("Elixir.Shop.Item"), tea = h.binary("tea", heap_bits);
        uint64_t st = h.at() + 2;
        h.words.insert(h.words.end(), {uint64_t{1} << 8 | (heap_bits ? 0x2cu : 0x3cu), 2, skeys, item, tea});
        EXPECT_EQ(text(src, st, ex), R"(%Shop.Item{name: "tea"})");
        uint64_t ikeys = h.tuple({Heap::small(1), h.atom("b")});
        uint64_t mixed = h.at() + 2;
        h.words.insert(h.words.end(), {uint64_t{1} << 8 | (heap_bits ? 0x2cu : 0x3cu), 2, ikeys, Heap::small(1), kNil});
        EXPECT_EQ(text(src, mixed, ex), "%{1 => 1, :b => []}");
        // The Erlang printer is unchanged by all this.
        EXPECT_EQ(text(src, map), "#{a => 1,b => [{timeout,5000},{name,x}]}");
    }
}

TEST(Terms, ElixirAtoms) {
    EXPECT_EQ(elixir_atom("ok"), ":ok");
    EXPECT_EQ(elixir_atom("valid?"), ":valid?");
    EXPECT_EQ(elixir_atom("Foo"), ":Foo");
    EXPECT_EQ(elixir_atom("true"), "true");
    EXPECT_EQ(elixir_atom("Elixir.MyApp.Repo"), "MyApp.Repo");
    EXPECT_EQ(elixir_atom("Elixir.my.mod"), ":\"Elixir.my.mod\"");
    EXPECT_EQ(elixir_atom("$callers"), ":\"$callers\"");
    EXPECT_EQ(elixir_atom("with \"quote\""), ":\"with \\\"quote\\\"\"");
}

TEST(Terms, PrintedAtoms) {
    EXPECT_EQ(printed_atom("init"), "init");
    EXPECT_EQ(printed_atom("gen_server@x"), "gen_server@x");
    EXPECT_EQ(printed_atom("Elixir.Foo"), "'Elixir.Foo'");
    EXPECT_EQ(printed_atom("$process_label"), "'$process_label'");
    EXPECT_EQ(printed_atom("after"), "'after'");
    EXPECT_EQ(printed_atom("it's"), "'it\\'s'");
    EXPECT_EQ(printed_atom(""), "''");
}

}  // namespace
