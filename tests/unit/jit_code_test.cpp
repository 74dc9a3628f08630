// Parsers of the VM's GDB JIT symfiles, and the index that walks the descriptor's entry list.
// Symfiles are written byte by byte in the layout of erts/emulator/beam/jit/beam_jit_metadata.cpp;
// the index is run against fake descriptors laid out in this process's own memory.
#include <unistd.h>

#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "symbols/jit_code.hpp"

namespace {

using Bytes = std::vector<std::byte>;

struct TestLine {
    uint32_t off, line;
    std::string file;
};
struct TestRange {
    uint32_t start, end;
    std::string name;
    std::vector<TestLine> lines;
};

class Writer {
public:
    template <class T>
    void put(T v) {
        auto p = reinterpret_cast<const std::byte*>(&v);
        bytes.insert(bytes.end(), p, p + sizeof(T));
    }
    void zeros(size_t n) { bytes.insert(bytes.end(), n, std::byte{0}); }
    // A name field as the VM writes it: length including the NUL, then the chars and the NUL.
    void name(const std::string& s) {
        put<uint16_t>(static_cast<uint16_t>(s.size() + 1));
        for (char c : s) bytes.push_back(static_cast<std::byte>(c));
        bytes.push_back(std::byte{0});
    }
    Bytes bytes;
};

// struct debug_info{header=1, module_info} followed by range_info/line_info records.
Bytes module_symfile(uint64_t base, uint32_t code_size, const std::string& name, const std::vector<TestRange>& ranges) {
    Writer w;
    w.put<uint32_t>(1);
    w.zeros(4);
    w.put<uint64_t>(base);
    w.put<uint32_t>(static_cast<uint32_t>(ranges.size()));
    w.put<uint32_t>(code_size);
    w.name(name);  // at +24/+26
    w.zeros(6);    // the VM skips sizeof(debug_info) == 32, not 26
    for (const auto& r : ranges) {
        w.put<uint32_t>(r.start);
        w.put<uint32_t>(r.end);
        w.put<uint32_t>(static_cast<uint32_t>(r.lines.size()));
        w.name(r.name);  // at +12/+14
        w.zeros(2);      // sizeof(range_info) == 16
        for (const auto& l : r.lines) {
            w.put<uint32_t>(l.off);
            w.put<uint32_t>(l.line);
            w.name(l.file);  // at +8/+10
            w.zeros(2);      // sizeof(line_info) == 12
        }
    }
    return w.bytes;
}

Bytes emulator_symfile(int32_t frame_layout, uint64_t normal_exit) {
    Writer w;
    w.put<uint32_t>(0);
    w.zeros(4);
    w.put<int32_t>(frame_layout);
    w.zeros(4);
    w.put<uint64_t>(normal_exit);
    w.zeros(8);  // sizeof(debug_info) is 32: the union is as big as module_info
    return w.bytes;
}

template <class T>
void poke(Bytes& b, size_t off, T v) {
    ASSERT_LE(off + sizeof(T), b.size());
    std::memcpy(b.data() + off, &v, sizeof(T));
}

constexpr uint64_t kBase = 0x7f0000100000;

Bytes lists_symfile() {
    return module_symfile(kBase, 0x400, "lists",
                          {{0x0, 0x40, "lists::codeHeader", {}},
                           {0x40, 0x60, "lists:foldl/3-CodeInfoPrologue", {}},
                           {0x60, 0x200, "lists:foldl/3", {{0x60, 1260, "lists.erl"}, {0x100, 1262, "lists.erl"}}}});
}

// Every successfully parsed module must satisfy what lookups rely on.
void expect_invariants(const bb::JitSymfile& s) {
    const bb::JitModule& m = s.module;
    EXPECT_GE(s.base + m.code_size, s.base);  // no wrap
    uint64_t prev_end = 0;
    for (const auto& r : m.ranges) {
        EXPECT_LT(r.start, r.end);
        EXPECT_LE(r.end, m.code_size);
        EXPECT_GE(r.start, prev_end);
        prev_end = r.end;
        for (size_t i = 1; i < r.lines.size(); i++) EXPECT_LE(r.lines[i - 1].start, r.lines[i].start);
    }
}

TEST(JitSymfile, ParsesModuleRangesAndLines) {
    auto s = bb::parse_module_symfile(lists_symfile());
    ASSERT_TRUE(s) << s.error();
    EXPECT_EQ(s->base, kBase);
    const bb::JitModule* m = &s->module;  // offsets from the base
    EXPECT_EQ(m->name, "lists");
    EXPECT_EQ(m->code_size, 0x400u);
    ASSERT_EQ(m->ranges.size(), 3u);
    EXPECT_EQ(m->ranges[0].name, "lists::codeHeader");
    EXPECT_EQ(m->ranges[0].start, 0u);
    EXPECT_EQ(m->ranges[0].end, 0x40u);
    EXPECT_EQ(m->ranges[1].name, "lists:foldl/3");  // suffix stripped
    EXPECT_TRUE(m->ranges[1].prologue);             // and remembered (beam-bpf-perfmap writes it)
    EXPECT_FALSE(m->ranges[2].prologue);
    EXPECT_EQ(m->ranges[1].start, 0x40u);
    EXPECT_EQ(m->ranges[2].name, "lists:foldl/3");
    EXPECT_EQ(m->ranges[2].end, 0x200u);
    ASSERT_EQ(m->ranges[2].lines.size(), 2u);
    EXPECT_EQ(m->ranges[2].lines[0].start, 0x60u);
    EXPECT_EQ(m->ranges[2].lines[0].line, 1260u);
    EXPECT_EQ(m->ranges[2].lines[1].start, 0x100u);
    EXPECT_EQ(m->files.at(m->ranges[2].lines[1].file), "lists.erl");
    expect_invariants(*s);
}

TEST(JitSymfile, ParsesModuleWithoutRanges) {
    auto s = bb::parse_module_symfile(module_symfile(kBase, 0, "empty", {}));
    ASSERT_TRUE(s) << s.error();
    EXPECT_EQ(s->module.name, "empty");
    EXPECT_TRUE(s->module.ranges.empty());
}

TEST(JitSymfile, EveryTruncationFails) {
    Bytes full = lists_symfile();
    for (size_t len = 0; len < full.size(); len++) {
        auto m = bb::parse_module_symfile(std::span(full).first(len));
        EXPECT_FALSE(m) << "length " << len;
        EXPECT_FALSE(m.error().empty()) << "length " << len;
    }
    Bytes emu = emulator_symfile(0, 0x1234);
    for (size_t len = 0; len < 24; len++) {
        auto e = bb::parse_emulator_symfile(std::span(emu).first(len));
        EXPECT_FALSE(e) << len;
        EXPECT_FALSE(e.error().empty());
    }
}

TEST(JitSymfile, TrailingBytesFail) {
    Bytes b = lists_symfile();
    b.push_back(std::byte{0});
    auto m = bb::parse_module_symfile(b);
    EXPECT_FALSE(m);
    EXPECT_NE(m.error().find("trailing"), std::string::npos) << m.error();
}

TEST(JitSymfile, HugeRangeCountFails) {
    Bytes b = module_symfile(kBase, 0x100, "m", {{0, 0x10, "m:f/0", {}}});
    poke<uint32_t>(b, 16, 0xFFFFFFFF);
    auto m = bb::parse_module_symfile(b);
    EXPECT_FALSE(m);
    EXPECT_NE(m.error().find("range count"), std::string::npos) << m.error();
    // The same with only the header there.
    Bytes head = module_symfile(kBase, 0x100, "m", {});
    poke<uint32_t>(head, 16, 0xFFFFFFFF);
    EXPECT_FALSE(bb::parse_module_symfile(head));
}

TEST(JitSymfile, HugeLineCountFails) {
    Bytes b = module_symfile(kBase, 0x100, "m", {{0, 0x10, "m:f/0", {{0, 1, "m.erl"}}}});
    poke<uint32_t>(b, 32 + 2 + 8, 0xFFFFFFFF);  // first range's line_count
    auto m = bb::parse_module_symfile(b);
    EXPECT_FALSE(m);
    EXPECT_NE(m.error().find("line count"), std::string::npos) << m.error();
}

TEST(JitSymfile, NameLengthPastTheEndFails) {
    Bytes b = lists_symfile();
    poke<uint16_t>(b, 24, 0xFFFF);  // module name_length
    auto m = bb::parse_module_symfile(b);
    EXPECT_FALSE(m);
    EXPECT_FALSE(m.error().empty());

    b = lists_symfile();
    size_t first_range = 32 + sizeof("lists");
    poke<uint16_t>(b, first_range + 12, 0xFFFF);  // first range's name_length
    m = bb::parse_module_symfile(b);
    EXPECT_FALSE(m);
    EXPECT_FALSE(m.error().empty());

    b = lists_symfile();
    poke<uint16_t>(b, 24, 0);  // no room even for the NUL
    EXPECT_FALSE(bb::parse_module_symfile(b));
}

TEST(JitSymfile, UnterminatedNameFails) {
    Bytes b = lists_symfile();
    poke<char>(b, 26 + 5, 'X');  // the NUL after "lists"
    auto m = bb::parse_module_symfile(b);
    EXPECT_FALSE(m);
    EXPECT_NE(m.error().find("NUL"), std::string::npos) << m.error();
}

TEST(JitSymfile, WrongKindFails) {
    EXPECT_FALSE(bb::parse_module_symfile(emulator_symfile(0, 1)));
    EXPECT_FALSE(bb::parse_emulator_symfile(lists_symfile()));
    Bytes b = lists_symfile();
    poke<uint32_t>(b, 0, 7);
    EXPECT_FALSE(bb::parse_module_symfile(b));
}

TEST(JitSymfile, BadRangesAreDroppedAndTheRestSorted) {
    auto m = bb::parse_module_symfile(module_symfile(kBase, 0x100, "m",
                                                     {{0x80, 0x90, "m:late/0", {}},
                                                      {0x10, 0x40, "m:a/0", {}},
                                                      {0x30, 0x50, "m:overlaps_a/0", {}},  // starts inside m:a/0
                                                      {0x60, 0x50, "m:inverted/0", {}},
                                                      {0x50, 0x50, "m::codeFooter", {}},  // empty
                                                      {0xF0, 0x101, "m:past_code/0", {}},
                                                      {0x40, 0x50, "m:b/0", {}}}));
    ASSERT_TRUE(m) << m.error();
    std::vector<std::string> names;
    for (const auto& r : m->module.ranges) names.push_back(r.name);
    EXPECT_EQ(names, (std::vector<std::string>{"m:a/0", "m:b/0", "m:late/0"}));
    expect_invariants(*m);
}

TEST(JitSymfile, ParsesEmulator) {
    auto e = bb::parse_emulator_symfile(emulator_symfile(1, 0x55550000abcd));
    ASSERT_TRUE(e) << e.error();
    EXPECT_EQ(e->frame_layout, 1);
    EXPECT_EQ(e->normal_exit, 0x55550000abcdu);
    EXPECT_FALSE(bb::parse_emulator_symfile(emulator_symfile(2, 0x1000)));
    EXPECT_FALSE(bb::parse_emulator_symfile(emulator_symfile(0, 0)));
}

TEST(JitSymfile, SurvivesRandomGarbage) {
    std::mt19937_64 rng(20240601);
    auto byte = [&] { return static_cast<std::byte>(rng() & 0xFF); };
    Bytes valid = lists_symfile();
    size_t parsed = 0;
    for (int i = 0; i < 4000; i++) {
        Bytes b;
        if (i % 2 == 0) {
            // Pure noise, sometimes with a plausible header so the parser gets past it.
            b.resize(rng() % 300);
            for (auto& x : b) x = byte();
            if (b.size() >= 32 && i % 4 == 0) {
                poke<uint32_t>(b, 0, 1);
                poke<uint32_t>(b, 16, static_cast<uint32_t>(rng() % 4));
                poke<uint16_t>(b, 24, static_cast<uint16_t>(rng() % 8));
            }
        } else {
            // A valid symfile with a few bytes changed or cut off.
            b = valid;
            for (int n = 1 + rng() % 4; n > 0; n--) b[rng() % b.size()] = byte();
            if (rng() % 4 == 0) b.resize(rng() % (b.size() + 1));
        }
        if (auto m = bb::parse_module_symfile(b)) {
            parsed++;
            expect_invariants(*m);
        } else {
            EXPECT_FALSE(m.error().empty());
        }
        (void)bb::parse_emulator_symfile(b);
    }
    EXPECT_GT(parsed, 0u);  // mutations of names and offsets often still parse
}

// --- JitCodeIndex against this process's own memory -----------------------------------------

// struct jit_descriptor and jit_code_entry as the VM lays them out.
struct FakeDescriptor {
    uint32_t version = 1, action = 0;
    uint64_t relevant = 0, first = 0;
    uint64_t mutex[5] = {};
};
struct FakeEntry {
    uint64_t next = 0, prev = 0, symfile_addr = 0, symfile_size = 0;
};

uint64_t addr_of(const void* p) { return reinterpret_cast<uint64_t>(p); }

// A VM-like list: register() pushes at the head as beam_jit_metadata.cpp does.
class FakeVm {
public:
    FakeVm() : desc_(std::make_unique<FakeDescriptor>()) {}
    uint64_t descriptor() const { return addr_of(desc_.get()); }

    FakeEntry* register_symfile(Bytes symfile) {
        symfiles_.push_back(std::make_unique<Bytes>(std::move(symfile)));
        entries_.push_back(std::make_unique<FakeEntry>());
        FakeEntry* e = entries_.back().get();
        e->symfile_addr = addr_of(symfiles_.back()->data());
        e->symfile_size = symfiles_.back()->size();
        e->next = desc_->first;
        if (e->next) reinterpret_cast<FakeEntry*>(e->next)->prev = addr_of(e);
        desc_->first = desc_->relevant = addr_of(e);
        desc_->action = 1;
        return e;
    }
    void unregister(FakeEntry* e) {
        if (e->prev) reinterpret_cast<FakeEntry*>(e->prev)->next = e->next;
        else desc_->first = e->next;
        if (e->next) reinterpret_cast<FakeEntry*>(e->next)->prev = e->prev;
        desc_->relevant = addr_of(e);
        desc_->action = 2;
    }
    FakeDescriptor& desc() { return *desc_; }

private:
    std::unique_ptr<FakeDescriptor> desc_;
    std::vector<std::unique_ptr<FakeEntry>> entries_;
    std::vector<std::unique_ptr<Bytes>> symfiles_;
};

// Code addresses are only numbers to the index: nothing is read there.
constexpr uint64_t kCode = 0x7f00dead0000;

Bytes one_function(const std::string& mod, const std::string& fun, uint64_t base = kCode) {
    return module_symfile(base, 0x1000, mod,
                          {{0x0, 0x40, mod + "::codeHeader", {}},
                           {0x100, 0x200, mod + ":" + fun, {{0x100, 7, mod + ".erl"}, {0x180, 9, mod + ".erl"}}}});
}

std::string name_at(const bb::JitCodeIndex& idx, uint64_t addr, uint64_t sample_ns) {
    auto hit = idx.lookup(addr, sample_ns);
    return hit ? hit->range->name : "<none>";
}

// The tests give refresh() their own instants.
uint64_t no_clock() { return 0; }

class JitIndex : public ::testing::Test {
protected:
    FakeVm vm;
    bb::RemoteMemory mem{getpid()};
};

TEST_F(JitIndex, IndexesModulesAndTheEmulator) {
    vm.register_symfile(emulator_symfile(0, 0x5555aaaa0000));
    vm.register_symfile(one_function("lists", "foldl/3"));
    vm.register_symfile(one_function("maps", "get/2", kCode + 0x1000));
    bb::JitCodeIndex idx(mem, vm.descriptor(), false, no_clock);
    auto r = idx.refresh(100);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.added, 3u);
    EXPECT_EQ(idx.module_count(), 2u);
    EXPECT_EQ(idx.range_count(), 4u);
    ASSERT_TRUE(idx.emulator());
    EXPECT_EQ(idx.emulator()->frame_layout, 0);
    EXPECT_EQ(idx.emulator()->normal_exit, 0x5555aaaa0000u);

    auto hit = idx.lookup(kCode + 0x190, 150);
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->module->name, "lists");
    EXPECT_EQ(hit->range->name, "lists:foldl/3");
    EXPECT_EQ(hit->line, 9u);
    ASSERT_TRUE(hit->file);
    EXPECT_EQ(*hit->file, "lists.erl");
    EXPECT_EQ(name_at(idx, kCode + 0x1100, 150), "maps:get/2");
    EXPECT_EQ(name_at(idx, kCode + 0x80, 150), "<none>");  // between ranges
    EXPECT_EQ(name_at(idx, kCode - 1, 150), "<none>");
    EXPECT_EQ(name_at(idx, kCode + 0x2000, 150), "<none>");

    // Nothing changed: nothing added, same generation.
    uint64_t gen = idx.generation();
    r = idx.refresh(200);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.added, 0u);
    EXPECT_EQ(r.retired, 0u);
    EXPECT_EQ(idx.generation(), gen);
}

// Two VMs of one release load the same module at other addresses: one copy of its symbols
// serves both, and each VM's addresses still resolve in its own place. A module that differs
// (another version: other offsets) is its own.
TEST_F(JitIndex, VmsShareEqualModules) {
    FakeVm other;
    vm.register_symfile(one_function("lists", "foldl/3"));
    other.register_symfile(one_function("lists", "foldl/3", kCode + 0x50000));
    other.register_symfile(module_symfile(kCode + 0x60000, 0x1000, "maps",
                                          {{0x0, 0x40, "maps::codeHeader", {}}, {0x100, 0x280, "maps:get/2", {}}}));
    bb::JitCodeIndex a(mem, vm.descriptor(), false, no_clock), b(mem, other.descriptor(), false, no_clock);
    ASSERT_TRUE(a.refresh(100).ok);
    ASSERT_TRUE(b.refresh(100).ok);
    auto in_a = a.lookup(kCode + 0x190, 150), in_b = b.lookup(kCode + 0x50190, 150);
    ASSERT_TRUE(in_a && in_b);
    EXPECT_EQ(in_a->module, in_b->module);  // one copy
    EXPECT_EQ(in_a->base, kCode);
    EXPECT_EQ(in_b->base, kCode + 0x50000);
    EXPECT_EQ(in_b->range->name, "lists:foldl/3");
    EXPECT_EQ(in_b->line, 9u);
    EXPECT_EQ(name_at(b, kCode + 0x190, 150), "<none>");  // a's address is not b's code
    EXPECT_EQ(name_at(b, kCode + 0x60200, 150), "maps:get/2");
    auto maps = b.lookup(kCode + 0x60200, 150);
    EXPECT_NE(maps->module, in_a->module);

    // Equal content is shared whatever its origin; a copy that differs in one offset is not.
    bb::JitModule m = *in_a->module;
    EXPECT_EQ(bb::share_module(m).get(), in_a->module);
    m.ranges.back().lines.back().start++;
    EXPECT_NE(bb::share_module(m).get(), in_a->module);
    // The perf map's view: absolute addresses from each VM's base.
    auto live = b.live_ranges();
    ASSERT_EQ(live.size(), 4u);
    EXPECT_EQ(live[1].base + live[1].range->start, kCode + 0x50100);
}

TEST_F(JitIndex, UnlinkedModuleAnswersForEarlierSamples) {
    FakeEntry* old_entry = vm.register_symfile(one_function("old", "f/0"));
    bb::JitCodeIndex idx(mem, vm.descriptor(), false, no_clock);
    ASSERT_TRUE(idx.refresh(100).ok);
    EXPECT_EQ(name_at(idx, kCode + 0x150, 150), "old:f/0");
    uint64_t gen = idx.generation();

    // Purged, and its code memory reused by a newly loaded module.
    vm.unregister(old_entry);
    vm.register_symfile(one_function("new", "g/1"));
    auto r = idx.refresh(200);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.added, 1u);
    EXPECT_EQ(r.retired, 1u);
    EXPECT_GT(idx.generation(), gen);
    EXPECT_EQ(idx.module_count(), 1u);

    EXPECT_EQ(name_at(idx, kCode + 0x150, 50), "old:f/0");
    EXPECT_EQ(name_at(idx, kCode + 0x150, 150), "old:f/0");
    EXPECT_EQ(name_at(idx, kCode + 0x150, 200), "old:f/0");  // retired at 200: still live then
    EXPECT_EQ(name_at(idx, kCode + 0x150, 201), "new:g/1");
    EXPECT_EQ(name_at(idx, kCode + 0x150, 250), "new:g/1");

    // A third generation: each sample goes to the module live at its time.
    FakeEntry* newest = vm.register_symfile(one_function("newer", "h/2"));
    vm.unregister(reinterpret_cast<FakeEntry*>(newest->next));
    ASSERT_TRUE(idx.refresh(300).ok);
    EXPECT_EQ(name_at(idx, kCode + 0x150, 150), "old:f/0");
    EXPECT_EQ(name_at(idx, kCode + 0x150, 250), "new:g/1");
    EXPECT_EQ(name_at(idx, kCode + 0x150, 350), "newer:h/2");
}

TEST_F(JitIndex, NewerModuleOverlappingAListedOneWins) {
    // OTP 25 leaves purged modules in the list: the newer entry at the same addresses wins.
    vm.register_symfile(one_function("old", "f/0"));
    bb::JitCodeIndex idx(mem, vm.descriptor(), false, no_clock);
    ASSERT_TRUE(idx.refresh(100).ok);
    vm.register_symfile(one_function("new", "g/1", kCode + 0x800));  // overlaps half of old
    auto r = idx.refresh(200);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.retired, 1u);
    EXPECT_EQ(idx.module_count(), 1u);
    EXPECT_EQ(name_at(idx, kCode + 0x150, 150), "old:f/0");
    EXPECT_EQ(name_at(idx, kCode + 0x950, 250), "new:g/1");
    EXPECT_EQ(name_at(idx, kCode + 0x150, 250), "<none>");  // old's code is gone by then
    // Still listed, still retired: a later refresh changes nothing.
    uint64_t gen = idx.generation();
    r = idx.refresh(300);
    EXPECT_EQ(r.added + r.retired, 0u);
    EXPECT_EQ(idx.generation(), gen);

    // All entries new in one walk: list order decides.
    bb::JitCodeIndex fresh(mem, vm.descriptor(), false, no_clock);
    ASSERT_TRUE(fresh.refresh(400).ok);
    EXPECT_EQ(fresh.module_count(), 1u);
    EXPECT_EQ(name_at(fresh, kCode + 0x950, 500), "new:g/1");
}

TEST_F(JitIndex, TornListKeepsThePreviousState) {
    vm.register_symfile(one_function("a", "f/0"));
    bb::JitCodeIndex idx(mem, vm.descriptor(), false, no_clock);
    ASSERT_TRUE(idx.refresh(100).ok);
    uint64_t gen = idx.generation();

    FakeEntry* b = vm.register_symfile(one_function("b", "f/0", kCode + 0x10000));
    uint64_t saved_next = b->next;
    b->next = addr_of(b);  // a cycle
    auto r = idx.refresh(200);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("cycle"), std::string::npos) << r.error;
    EXPECT_EQ(idx.generation(), gen);
    EXPECT_EQ(name_at(idx, kCode + 0x150, 250), "a:f/0");
    EXPECT_EQ(name_at(idx, kCode + 0x10150, 250), "<none>");

    b->next = 0x10;  // unreadable
    r = idx.refresh(200);
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(idx.module_count(), 1u);

    b->next = saved_next;
    r = idx.refresh(300);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(idx.module_count(), 2u);
    EXPECT_EQ(name_at(idx, kCode + 0x10150, 350), "b:f/0");
}

TEST_F(JitIndex, UnreadableDescriptorOrUnknownVersionFails) {
    bb::JitCodeIndex nowhere(mem, 0x10, false, no_clock);
    EXPECT_FALSE(nowhere.refresh(1).ok);
    vm.desc().version = 2;
    bb::JitCodeIndex idx(mem, vm.descriptor(), false, no_clock);
    auto r = idx.refresh(1);
    EXPECT_FALSE(r.ok);
    EXPECT_NE(r.error.find("version"), std::string::npos) << r.error;
}

TEST_F(JitIndex, GarbageSymfileIsSkippedNotFatal) {
    vm.register_symfile(one_function("good", "f/0"));
    Bytes garbage(100, std::byte{0x5A});
    vm.register_symfile(garbage);
    FakeEntry* huge = vm.register_symfile(one_function("huge", "f/0", kCode + 0x10000));
    huge->symfile_size = uint64_t{1} << 40;  // never read
    bb::JitCodeIndex idx(mem, vm.descriptor(), false, no_clock);
    auto r = idx.refresh(100);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.added, 1u);
    EXPECT_NE(r.error.find("2 JIT symfile(s) skipped"), std::string::npos) << r.error;
    EXPECT_EQ(idx.module_count(), 1u);
    EXPECT_EQ(name_at(idx, kCode + 0x150, 150), "good:f/0");
    // Remembered as bad, not parsed again.
    r = idx.refresh(200);
    EXPECT_TRUE(r.ok);
    EXPECT_TRUE(r.error.empty()) << r.error;
}

// A VM whose entries all name one big symfile (issue 20: 100,000 entries naming one huge
// symbol file): what is read in total stays under the budget (512 MiB), the rest are kept
// unread and the refresh says how many, and none is read again.
TEST_F(JitIndex, SymfileBytesHaveATotalBudget) {
    Bytes big(32 << 20, std::byte{0x5A});  // garbage: read, fails to parse
    for (int i = 0; i < 40; i++) {
        FakeEntry* e = vm.register_symfile(Bytes(32));
        e->symfile_addr = addr_of(big.data());
        e->symfile_size = big.size();
    }
    vm.register_symfile(one_function("good", "f/0"));  // the newest: walked first
    bb::JitCodeIndex idx(mem, vm.descriptor(), false, no_clock);
    auto r = idx.refresh(100);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_NE(r.error.find("15 JIT symfile(s) skipped"), std::string::npos) << r.error;  // 15 x 32 MiB + good
    EXPECT_NE(r.error.find("25 JIT symfile(s) not read: over the 512 MiB"), std::string::npos) << r.error;
    EXPECT_EQ(name_at(idx, kCode + 0x150, 150), "good:f/0");
    r = idx.refresh(200);
    EXPECT_TRUE(r.ok);
    EXPECT_TRUE(r.error.empty()) << r.error;
}

// What the walker's probe on __jit_debug_register_code reports for an entry.
bb::JitCodeEvent event_for(const FakeEntry* e, bool registered, uint64_t t) {
    bb::JitCodeEvent ev{registered, addr_of(e), e->symfile_addr, e->symfile_size, {}, t};
    std::memcpy(ev.head.data(), reinterpret_cast<const void*>(e->symfile_addr), sizeof(ev.head));
    return ev;
}

// A refresh only knows a change happened since the last one; the VM's register calls say
// when. A sample between the purge-and-reload and the refresh that sees it belongs to the new
// code, not to the code it replaced (the reload storm of tests/integration/reload_test.cpp).
TEST_F(JitIndex, CodeEventsGiveExactInstants) {
    FakeEntry* old_entry = vm.register_symfile(one_function("old", "f/0"));
    bb::JitCodeIndex idx(mem, vm.descriptor(), false, no_clock);
    ASSERT_TRUE(idx.refresh(100).ok);

    vm.unregister(old_entry);
    idx.note(event_for(old_entry, false, 120));
    FakeEntry* new_entry = vm.register_symfile(one_function("new", "g/1"));
    idx.note(event_for(new_entry, true, 130));
    ASSERT_TRUE(idx.refresh(200).ok);
    EXPECT_EQ(name_at(idx, kCode + 0x150, 119), "old:f/0");
    EXPECT_EQ(name_at(idx, kCode + 0x150, 131), "new:g/1");  // a refresh alone said old:f/0
    auto hit = idx.lookup(kCode + 0x150, 131);
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->valid_from, 130u);

    // An event read after the refresh that listed its module corrects the instant too.
    FakeEntry* newer = vm.register_symfile(one_function("newer", "h/2", kCode + 0x800));  // overlaps
    ASSERT_TRUE(idx.refresh(300).ok);
    EXPECT_EQ(name_at(idx, kCode + 0x150, 250), "new:g/1");  // the refresh's guess: gone at 300
    uint64_t gen = idx.generation();
    idx.note(event_for(newer, true, 240));
    EXPECT_GT(idx.generation(), gen);
    EXPECT_EQ(name_at(idx, kCode + 0x150, 239), "new:g/1");
    EXPECT_EQ(name_at(idx, kCode + 0x150, 250), "<none>");  // shadowed at the exact instant
    EXPECT_EQ(name_at(idx, kCode + 0x950, 250), "newer:h/2");
}

// OTP 25 and 26 only prepend: a walk stops at the entry the last one started with, so a VM
// that has loaded thousands of modules costs a read per new one, and a walk is not torn by
// loads during it.
TEST_F(JitIndex, NeverUnlinkingListIsWalkedIncrementally) {
    for (int i = 0; i < 50; i++) vm.register_symfile(one_function("m" + std::to_string(i), "f/0", kCode + 0x1000 * i));
    bb::JitCodeIndex idx(mem, vm.descriptor(), true, no_clock);
    ASSERT_TRUE(idx.refresh(100).ok);
    EXPECT_EQ(idx.module_count(), 50u);
    FakeEntry* last = vm.register_symfile(one_function("late", "f/0", kCode + 0x100000));
    // Corrupt an old entry: an incremental walk never reads it again.
    FakeEntry* first = reinterpret_cast<FakeEntry*>(last->next);
    uint64_t saved = reinterpret_cast<FakeEntry*>(first->next)->next;
    reinterpret_cast<FakeEntry*>(first->next)->next = 0x10;
    auto r = idx.refresh(200);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.added, 1u);
    EXPECT_EQ(idx.module_count(), 51u);
    EXPECT_EQ(name_at(idx, kCode + 0x100150, 250), "late:f/0");
    EXPECT_EQ(name_at(idx, kCode + 0x150, 250), "m0:f/0");
    reinterpret_cast<FakeEntry*>(first->next)->next = saved;

    // Where entries are unlinked, the same list is walked whole (and the corruption seen).
    bb::JitCodeIndex full(mem, vm.descriptor(), false, no_clock);
    ASSERT_TRUE(full.refresh(100).ok);
    reinterpret_cast<FakeEntry*>(first->next)->next = 0x10;
    vm.register_symfile(one_function("later", "f/0", kCode + 0x200000));
    EXPECT_FALSE(full.refresh(200).ok);
    reinterpret_cast<FakeEntry*>(first->next)->next = saved;
}

// Retired modules answer for samples taken before they went, but only for a while: a VM
// that reloads code all day must not grow the profiler (the 1,200 s soak grew 6.8% before).
TEST_F(JitIndex, RetiredModulesAreForgottenAfterAWhile) {
    constexpr uint64_t s = 1'000'000'000;
    std::vector<FakeEntry*> entries;
    for (int i = 0; i < 100; i++)
        entries.push_back(vm.register_symfile(one_function("m" + std::to_string(i), "f/0", kCode + 0x1000 * i)));
    bb::JitCodeIndex idx(mem, vm.descriptor(), false, no_clock);
    ASSERT_TRUE(idx.refresh(1).ok);
    for (int i = 0; i < 99; i++) {
        vm.unregister(entries[i]);
        idx.note(event_for(entries[i], false, 2 * s));
    }
    EXPECT_EQ(name_at(idx, kCode + 0x150, s), "m0:f/0");  // taken before the purge
    EXPECT_EQ(name_at(idx, kCode + 0x150, 3 * s), "<none>");
    vm.unregister(entries[99]);
    idx.note(event_for(entries[99], false, 40 * s));
    EXPECT_EQ(name_at(idx, kCode + 0x150, s), "<none>");  // purged 38 s ago: forgotten
    EXPECT_EQ(name_at(idx, kCode + 0x1000 * 99 + 0x150, 39 * s), "m99:f/0");
}

TEST_F(JitIndex, EmptyListIsFine) {
    bb::JitCodeIndex idx(mem, vm.descriptor(), false, no_clock);
    auto r = idx.refresh(1);
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(idx.module_count(), 0u);
    EXPECT_FALSE(idx.emulator());
    EXPECT_FALSE(idx.lookup(kCode, 2));
}

}  // namespace
