// What beam-bpf reads of a VM, on memory images laid out as each release's source defines them
// (its row in the release table, and the offsets table its row starts from), read through the
// same code as a live VM: the atom table (IndexTable, Atom entries and their text: a byte
// pointer up to OTP 27, a heap binary in the literal area from 28), the process table and a
// Process with its registered name, and what process_info(P, memory) counts outside the heaps
// (its message queues, heap fragments, dictionary, ErtsPSD). The images live in this test's own
// memory and are read with process_vm_readv, as the target's are.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <deque>
#include <string>
#include <vector>

#include "inspect/ets_tables.hpp"
#include "inspect/process_table.hpp"
#include "inspect/processes.hpp"
#include "target/release.hpp"

namespace {

using namespace bb;

// Zeroed blocks of words that stay put, written as a VM would lay them out.
class Image {
public:
    uint64_t alloc(size_t bytes) {
        blocks_.emplace_back((bytes + 7) / 8 + 2, 0);
        return reinterpret_cast<uint64_t>(blocks_.back().data());
    }
    template <class T>
    static void put(uint64_t addr, T v) {
        std::memcpy(reinterpret_cast<void*>(addr), &v, sizeof v);
    }
    const RemoteMemory& mem() const { return mem_; }

private:
    std::deque<std::vector<uint64_t>> blocks_;
    RemoteMemory mem_{getpid()};
};

constexpr uint64_t atom_term(uint64_t ix) { return ix << 6 | 0x0b; }

// An atom table as atom.c and index.h make it: an IndexTable whose seg_table holds pages of 1024
// Atom pointers; each Atom with its `len` and its text as `release` keeps it.
struct AtomImage {
    Image& img;
    const VmOffsets& o;
    const OtpRelease& rel;
    uint64_t table, pages[2];
    int entries = 0;

    AtomImage(Image& i, const VmOffsets& off, const OtpRelease& r) : img(i), o(off), rel(r) {
        table = img.alloc(std::max(o.itab_entries, o.itab_seg_table) + 8);
        uint64_t seg = img.alloc(16);
        for (int p = 0; p < 2; p++) pages[p] = img.alloc(8 * 1024), Image::put(seg + 8 * p, pages[p]);
        Image::put(table + o.itab_seg_table, seg);
    }
    // Adds `text` at index `ix`; returns its term.
    uint64_t add(uint64_t ix, const std::string& text) {
        uint64_t atom = img.alloc(o.atom_name + 8);
        Image::put<int16_t>(atom + o.atom_len, static_cast<int16_t>(text.size()));
        const TermLayout& t = rel.terms;
        if (rel.atom_text == AtomText::binary && text.size() <= 64) {
            // ErlHeapBits (erl_bits.h): thing_word, size in bits, the bytes; a boxed term to it.
            uint64_t words = (text.size() + 7) / 8;
            uint64_t bits = img.alloc(16 + 8 * words);
            Image::put(bits, (1 + words) << 6 | t.heap_bin);
            Image::put<uint64_t>(bits + 8, 8 * text.size());
            std::memcpy(reinterpret_cast<void*>(bits + 16), text.data(), text.size());
            Image::put(atom + o.atom_name, bits | 2);
        } else if (rel.atom_text == AtomText::binary) {
            // Above 64 bytes (ERL_ONHEAP_BINARY_LIMIT): an ErlSubBits (thing_word, base_flags,
            // start and end in bits, orig) over the bytes of an off-heap Binary, here 24 bytes
            // into its allocation (its header, as Binary has).
            uint64_t binary = img.alloc(24 + text.size()), sub = img.alloc(40);
            std::memcpy(reinterpret_cast<void*>(binary + 24), text.data(), text.size());
            Image::put(sub, uint64_t{4} << 6 | t.sub_bin);
            Image::put(sub + 8, binary + 16);  // base: start is in bits from here
            Image::put<uint64_t>(sub + 16, 64);
            Image::put<uint64_t>(sub + 24, 64 + 8 * text.size());
            Image::put(atom + o.atom_name, sub | 2);
        } else {
            uint64_t bytes = img.alloc(text.size());
            std::memcpy(reinterpret_cast<void*>(bytes), text.data(), text.size());
            Image::put(atom + o.atom_name, bytes);
        }
        Image::put(pages[ix >> 10] + 8 * (ix & 1023), atom);
        entries = std::max(entries, static_cast<int>(ix) + 1);
        Image::put<int32_t>(table + o.itab_entries, entries);
        return atom_term(ix);
    }
    std::optional<std::string> text(uint64_t term) const { return read_atom_text(img.mem(), o, rel, table, term); }
    uint64_t atom_address(uint64_t ix) const { return *reinterpret_cast<uint64_t*>(pages[ix >> 10] + 8 * (ix & 1023)); }
};

// A Process as the offsets table lays it out: a live, waiting process with a small heap.
uint64_t make_process(Image& img, const VmOffsets& o, uint64_t pid_term) {
    uint64_t p = img.alloc(o.proc_size);
    uint64_t heap = img.alloc(8 * 233);
    Image::put(p + o.proc_id, pid_term);
    Image::put(p + o.proc_heap, heap);
    Image::put(p + o.proc_htop, heap + 8 * 40);
    Image::put(p + o.proc_stop, heap + 8 * 230);
    Image::put(p + o.proc_hend, heap + 8 * 233);
    Image::put<uint64_t>(p + o.proc_heap_sz, 233);
    return p;
}

// The offsets a release's row starts from (its own table, or the nearest release's).
const VmOffsets& offsets_for(const OtpRelease& r) {
    static std::map<int, VmOffsets> cache;
    auto [it, fresh] = cache.try_emplace(r.layout_from);
    if (fresh) it->second = *builtin_offsets(std::to_string(r.layout_from), "", "");
    return it->second;
}

class ReleaseImages : public ::testing::TestWithParam<int> {
protected:
    const OtpRelease& rel = *find_release(GetParam());
    const VmOffsets& o = offsets_for(rel);
};
INSTANTIATE_TEST_SUITE_P(Releases, ReleaseImages, ::testing::Values(25, 26, 27, 28, 29),
                         [](const auto& info) { return "OTP" + std::to_string(info.param); });

TEST_P(ReleaseImages, AtomText) {
    Image img;
    AtomImage atoms(img, o, rel);
    std::string long_utf8;
    for (int k = 0; k < 255; k++) long_utf8 += "\xc3\xa9";  // 255 characters, 510 bytes
    uint64_t init = atoms.add(3, "init"), repo = atoms.add(1500, "Elixir.MyApp.Repo");
    uint64_t empty = atoms.add(4, ""), eight = atoms.add(5, "12345678"), utf8 = atoms.add(6, long_utf8);
    EXPECT_EQ(atoms.text(init), "init");
    EXPECT_EQ(atoms.text(repo), "Elixir.MyApp.Repo");  // on the second page
    EXPECT_EQ(atoms.text(empty), "");
    EXPECT_EQ(atoms.text(eight), "12345678");   // a whole word, no padding
    EXPECT_EQ(atoms.text(utf8), long_utf8);     // from 28 a sub-binary: over 64 bytes
    EXPECT_FALSE(atoms.text(atom_term(1501)));  // past the table's entries
    EXPECT_FALSE(atoms.text(0x3f));             // not an atom
    EXPECT_FALSE(read_atom_text(img.mem(), o, rel, 0, init));
}

// find_atoms() batches its reads: the same answers as reading each atom's text, past decoys of
// the same length (before and after the one wanted, on both pages), an entry whose Atom cannot
// be read, one whose text cannot, and a text of more than 64 bytes.
TEST_P(ReleaseImages, AtomsFoundByTheirText) {
    Image img;
    AtomImage atoms(img, o, rel);
    std::string long_utf8;
    for (int k = 0; k < 40; k++) long_utf8 += "\xc3\xa9";  // 80 bytes: from 28 a sub-binary
    for (uint64_t ix = 0; ix < 1900; ix += 7) atoms.add(ix, ix % 2 ? "$initial_calm" : "$caller5");
    const uint64_t initial = atoms.add(1030, "$initial_call"), callers = atoms.add(12, "$callers"),
                   utf8 = atoms.add(1901, long_utf8);
    // Before the one wanted, in the same reads: an Atom that does not read, and a text that
    // does not.
    Image::put<uint64_t>(atoms.pages[0] + 8 * 11, 0x10);
    const uint64_t bad_text = atoms.add(10, "$callers");
    Image::put<uint64_t>(atoms.atom_address(10) + o.atom_name, rel.atom_text == AtomText::binary ? 0x12 : 0x10);
    auto found = find_atoms(img.mem(), o, rel, atoms.table, {"$callers", "$initial_call", long_utf8, "absent"},
                            1u << 20);
    EXPECT_EQ(found, (std::vector<uint64_t>{callers, initial, utf8, 0}));
    EXPECT_FALSE(atoms.text(bad_text));
    // Within max_atoms only: the second page is not read.
    EXPECT_EQ(find_atoms(img.mem(), o, rel, atoms.table, {"$initial_call"}, 1024), std::vector<uint64_t>{0});
}

// An image of the other kind of release does not read as one of this kind: the row decides.
TEST_P(ReleaseImages, AtomTextOfTheOtherKindDoesNotRead) {
    OtpRelease other = rel;
    other.atom_text = rel.atom_text == AtomText::binary ? AtomText::bytes : AtomText::binary;
    other.terms = find_release(28)->terms;
    Image img;
    AtomImage atoms(img, o, other);
    uint64_t init = atoms.add(3, "init");
    ASSERT_EQ(atoms.text(init), "init");
    EXPECT_NE(read_atom_text(img.mem(), o, rel, atoms.table, init).value_or(""), "init");
}

// Heap binaries that are not what 28 and 29 store atom text in: not read, never misread.
TEST(ReleaseImagesHeapBits, MalformedNameBinaries) {
    const OtpRelease& rel = *find_release(28);
    const VmOffsets& o = offsets_for(rel);
    Image img;
    AtomImage atoms(img, o, rel);
    uint64_t init = atoms.add(3, "init");
    uint64_t atom = atoms.atom_address(3);
    uint64_t bin = *reinterpret_cast<uint64_t*>(atom + o.atom_name) - 2;
    const uint64_t header = *reinterpret_cast<uint64_t*>(bin);
    ASSERT_EQ(atoms.text(init), "init");
    Image::put(bin, (header & ~0x3full) | 0x24);  // SUB_BITS, not HEAP_BITS
    EXPECT_FALSE(atoms.text(init));
    Image::put(bin, header + (1ull << 6));  // an arity that is not the text's
    EXPECT_FALSE(atoms.text(init));
    Image::put(bin, header);
    Image::put<uint64_t>(bin + 8, 31);  // bits that are not len bytes
    EXPECT_FALSE(atoms.text(init));
    Image::put<uint64_t>(bin + 8, 32);
    Image::put(atom + o.atom_name, bin | 1);  // a list pointer, not a boxed one
    EXPECT_FALSE(atoms.text(init));
    Image::put(atom + o.atom_name, bin | 2);
    Image::put<int16_t>(atom + o.atom_len, -1);
    EXPECT_FALSE(atoms.text(init));
    Image::put<int16_t>(atom + o.atom_len, 4);
    EXPECT_EQ(atoms.text(init), "init");

    // A long atom's sub-binary: flag bits in its base (a writable source), a start that is not
    // a whole byte, an end that is not its length.
    std::string long_text(100, 'x');
    uint64_t name = atoms.add(7, long_text);
    uint64_t sub = *reinterpret_cast<uint64_t*>(atoms.atom_address(7) + o.atom_name) - 2;
    ASSERT_EQ(atoms.text(name), long_text);
    const uint64_t base = *reinterpret_cast<uint64_t*>(sub + 8);
    Image::put(sub + 8, base | 1);
    EXPECT_FALSE(atoms.text(name));
    Image::put(sub + 8, base);
    Image::put<uint64_t>(sub + 16, 63);
    EXPECT_FALSE(atoms.text(name));
    Image::put<uint64_t>(sub + 16, 64);
    Image::put<uint64_t>(sub + 24, 64 + 8 * 99);
    EXPECT_FALSE(atoms.text(name));
    Image::put<uint64_t>(sub + 24, 64 + 8 * 100);
    EXPECT_EQ(atoms.text(name), long_text);
}

// The process table (ErtsPTab), init's Process in slot 0 with its RegProc, and its name and
// initial call read through the atom table: what names rest on at attach.
TEST_P(ReleaseImages, ProcessTableAndNames) {
    Image img;
    AtomImage atoms(img, o, rel);
    uint64_t init = atoms.add(3, "init"), otp_ring0 = atoms.add(700, "otp_ring0"), start = atoms.add(1030, "start");
    uint64_t ptab = img.alloc(std::max(o.ptab_tab, o.ptab_max) + 8);
    uint64_t slots = img.alloc(8 * 16);
    Image::put(ptab + o.ptab_tab, slots);
    Image::put<uint32_t>(ptab + o.ptab_max, 16);
    uint64_t p = make_process(img, o, 0x3);  // <0.0.0>
    uint64_t reg = img.alloc(o.regproc_name + 8);
    Image::put(reg + o.regproc_name, init);
    Image::put(p + o.proc_reg, reg);
    Image::put(p + o.proc_initial, otp_ring0);
    Image::put(p + o.proc_initial + 8, start);
    Image::put<uint64_t>(p + o.proc_initial + 16, 2);
    Image::put(slots, p);
    Image::put<uint64_t>(slots + 8, 0x7);  // a slot being filled: a marker, not a process

    ProcessTable t = read_process_table(img.mem(), o, ptab);
    ASSERT_EQ(t.processes.size(), 1u);
    EXPECT_EQ(t.unreadable, 1u);
    const ProcessEntry& e = t.processes[0];
    EXPECT_EQ(e.pid, 0x3u);
    EXPECT_EQ(e.reg_name, init);
    EXPECT_EQ(atoms.text(e.reg_name), "init");
    EXPECT_EQ(atoms.text(e.initial[0]), "otp_ring0");
    EXPECT_EQ(atoms.text(e.initial[1]), "start");
    EXPECT_EQ(e.initial[2], 2u);
    EXPECT_EQ(e.memory(o.proc_size), o.proc_size + 8 * 233u);
}

// process_info(P, memory) outside the heaps (erts_process_memory()): an ErtsMessage per queued
// message in the inner, middle and outer queues, the words of their heap fragments (in the
// message, or a chain), no non-message signal, the dictionary's array, the ErtsPSD.
TEST_P(ReleaseImages, MemoryOutsideTheHeaps) {
    Image img;
    uint64_t p = make_process(img, o, 0x1230 | 0x3);
    auto message = [&](uint64_t term, uint64_t data) {
        uint64_t m = img.alloc(o.msg_size);
        Image::put(m + o.msg_m, term);
        Image::put(m + o.msg_data, data);
        return m;
    };
    auto fragment = [&](uint64_t used, uint64_t next) {
        uint64_t f = img.alloc(o.hfrag_mem + 8 * used);
        Image::put(f + o.hfrag_used_size, used);
        Image::put(f + o.hfrag_next, next);
        return f;
    };
    // Inner: on the heap (no data attached), in its own fragment (ERTS_MSG_COMBINED_HFRAG), in
    // a chain of two, and a receive marker (a signal's tag: not a message).
    uint64_t on_heap = message(0xf, 0), combined = message(0xf, 1), chained = message(0xf, fragment(7, fragment(5, 0)));
    uint64_t marker = message((16ull << 8 | 0x30), 0);
    Image::put(combined + o.msg_hfrag + o.hfrag_used_size, uint64_t{3});
    Image::put(on_heap + o.msg_next, combined);
    Image::put(combined + o.msg_next, marker);
    Image::put(marker + o.msg_next, chained);
    Image::put(p + o.proc_sig_first, on_heap);
    Image::put(p + o.proc_sig_cont, message(0xf, fragment(11, 0)));  // middle
    Image::put(p + o.proc_sig_inq_first, message(0xf, 0));           // outer
    uint64_t dict = img.alloc(o.pdict_data + 8 * 16);
    Image::put<uint32_t>(dict + o.pdict_array_size, 16);
    Image::put(p + o.proc_dictionary, dict);
    Image::put(p + o.proc_psd, img.alloc(o.psd_size));

    std::vector<std::byte> copy(o.proc_size);
    std::memcpy(copy.data(), reinterpret_cast<void*>(p), o.proc_size);
    auto e = parse_process(copy, p, o);
    ASSERT_TRUE(e);
    ASSERT_TRUE(add_outside_memory(img.mem(), o, *e));
    EXPECT_EQ(e->queued_messages, 5u);
    EXPECT_EQ(e->queue_bytes, 5 * o.msg_size + 8 * (3 + 7 + 5 + 11));
    EXPECT_EQ(e->dict_bytes, o.pdict_data + 8 * 16u);
    EXPECT_EQ(e->psd_bytes, o.psd_size);
    EXPECT_EQ(e->memory(o.proc_size), o.proc_size + 8 * 233 + e->queue_bytes + e->dict_bytes + o.psd_size);

    // A queue that does not end (a message freed and reused under the reader) stops at the bound.
    Image::put(marker + o.msg_next, on_heap);
    EXPECT_FALSE(add_outside_memory(img.mem(), o, *e, 1000));
    EXPECT_LE(e->queued_messages, 1000u);
}

// process_info(P, binary) from outside: the binaries on a process's off-heap list, its heap
// fragments' lists and (from OTP 27) its wrt_bins, each with its Binary's size and reference
// count; a fun on the list is passed over. A list that loops, or leaves memory, ends the walk
// with a failure, bounded.
TEST_P(ReleaseImages, OffHeapBinaries) {
    Image img;
    const TermLayout& t = rel.terms;
    uint64_t p = make_process(img, o, 0x1230 | 0x3);
    auto binary = [&](uint64_t bytes, uint64_t refc) {
        uint64_t b = img.alloc(std::max(o.bin_refc, o.bin_orig_size) + 8 + bytes);
        Image::put(b + o.bin_orig_size, bytes);
        Image::put(b + o.bin_refc, refc);
        return b;
    };
    auto node = [&](uint64_t subtag, uint64_t val, uint64_t next) {  // a ProcBin/BinRef or a fun
        uint64_t n = img.alloc(48);
        Image::put(n, uint64_t{2} << 6 | subtag);
        Image::put(n + o.ohh_next, next);
        if (val) Image::put(n + t.refc_val, val);
        return n;
    };
    const uint64_t big = binary(32 << 20, 3), small = binary(100, 1), writable = binary(256, 1);
    const uint64_t kFun = 0x14;
    uint64_t second = node(t.refc_bin, small, 0), fun = node(kFun, 0, second), first = node(t.refc_bin, big, fun);
    Image::put(p + o.proc_off_heap, first);
    uint64_t frag = img.alloc(std::max({o.hfrag_next, o.hfrag_off_heap, o.hfrag_used_size}) + 8);
    Image::put(frag + o.hfrag_off_heap, node(t.refc_bin, big, 0));  // a second handle to `big`
    Image::put(p + o.proc_mbuf, frag);
    Image::put(p + o.proc_wrt_bins, node(t.refc_bin, writable, 0));

    std::vector<std::byte> copy(o.proc_size);
    std::memcpy(copy.data(), reinterpret_cast<void*>(p), o.proc_size);
    auto e = parse_process(copy, p, o);
    ASSERT_TRUE(e);
    std::vector<BinaryHold> holds;
    uint64_t budget = 1000;
    ASSERT_TRUE(read_binaries(img.mem(), o, t, *e, budget, [&](const BinaryHold& h) { holds.push_back(h); }));
    const bool wrt = t.bits_unified();  // 25 and 26 leave wrt_bins out
    EXPECT_EQ(e->binary_count, wrt ? 4u : 3u);
    EXPECT_EQ(e->binary_bytes, 2 * (32u << 20) + 100 + (wrt ? 256 : 0));
    ASSERT_EQ(holds.size(), e->binary_count);
    EXPECT_EQ(holds[0].binary, big);
    EXPECT_EQ(holds[0].refc, 3u);
    EXPECT_EQ(holds[1].binary, small);

    // A list whose last node points back at its first: bounded by the budget, then failed.
    Image::put(second + o.ohh_next, first);
    budget = 1000;
    EXPECT_FALSE(read_binaries(img.mem(), o, t, *e, budget));
    EXPECT_GT(budget, 0u) << "the cycle was found before the budget ran out";
    // A node pointing outside the target's memory (and a Binary that is not one).
    Image::put(second + o.ohh_next, uint64_t{0x10});
    budget = 1000;
    EXPECT_FALSE(read_binaries(img.mem(), o, t, *e, budget));
    Image::put(second + o.ohh_next, uint64_t{0});
    Image::put(small + o.bin_refc, uint64_t{0});
    budget = 1000;
    EXPECT_FALSE(read_binaries(img.mem(), o, t, *e, budget));
}

// The schedulers' lists of ETS tables (erl_db.c's save_sched_table(): circular through
// common.all), one table with its counters in place and one with decentralized counters whose
// slots each count a part (one negative: a group that deleted more than it inserted).
TEST_P(ReleaseImages, EtsTables) {
    Image img;
    const uint32_t end = std::max({o.dbt_all_next, o.dbt_owner, o.dbt_name, o.dbt_btid, o.dbt_status,
                                   o.dbt_decentralized, o.dbt_counters}) +
                         24;
    auto table = [&](uint32_t status, uint64_t owner) {
        uint64_t tb = img.alloc(end);
        Image::put(tb + o.dbt_owner, owner);
        Image::put(tb + o.dbt_name, atom_term(77));
        Image::put(tb + o.dbt_status, status);
        Image::put(tb + o.dbt_all_next, tb);  // alone on its list
        return tb;
    };
    constexpr uint32_t kPublicSet = 4 | 0x10 | 0x800, kPrivateCatree = 1 | 0x100;
    const uint64_t a = table(kPublicSet, 0x1230 | 0x3), b = table(kPrivateCatree, 0x4560 | 0x3);
    Image::put<int64_t>(a + o.dbt_counters, 10);
    Image::put<int64_t>(a + o.dbt_counters + 8, 4096);
    uint64_t magic = img.alloc(o.mbin_refn + 12);
    for (uint32_t k = 0; k < 3; k++) Image::put<uint32_t>(magic + o.mbin_refn + 4 * k, 100 + k);
    Image::put(a + o.dbt_btid, magic);
    Image::put<uint8_t>(b + o.dbt_decentralized, 1);
    const uint32_t slots = 3;
    uint64_t array = img.alloc(o.flxctr_array + slots * o.flxctr_elem_size);
    const int64_t objects[slots] = {5, 9, -2}, bytes[slots] = {800, 1600, -160};
    for (uint32_t k = 0; k < slots; k++) {
        Image::put(array + o.flxctr_array + k * o.flxctr_elem_size, objects[k]);
        Image::put(array + o.flxctr_array + k * o.flxctr_elem_size + 8, bytes[k]);
    }
    Image::put(b + o.dbt_counters, array);
    Image::put(a + o.dbt_all_next, b);
    Image::put(b + o.dbt_all_next, a);

    const uint64_t lists[] = {a, 0};
    EtsTables r = read_ets_tables(img.mem(), o, lists, slots);
    ASSERT_EQ(r.tables.size(), 2u);
    EXPECT_EQ(r.changed, 0u);
    EXPECT_EQ(r.tables[0].objects, 10);
    EXPECT_EQ(r.tables[0].bytes, 4096);
    EXPECT_STREQ(r.tables[0].type(), "set");
    EXPECT_STREQ(r.tables[0].protection(), "public");
    EXPECT_TRUE(r.tables[0].named());
    EXPECT_EQ(r.tables[0].refn, (std::array<uint32_t, 3>{100, 101, 102}));
    EXPECT_TRUE(r.tables[1].decentralized);
    EXPECT_EQ(r.tables[1].objects, 12);
    EXPECT_EQ(r.tables[1].bytes, 2240);
    EXPECT_STREQ(r.tables[1].type(), "ordered_set");
    EXPECT_STREQ(r.tables[1].write_concurrency(), "true");
    EXPECT_EQ(r.tables[1].owner, uint64_t{0x4560 | 0x3});

    // A snapshot under way: counted, its figures kept.
    Image::put<int64_t>(array + o.flxctr_snapshot, 1);
    EXPECT_EQ(read_ets_tables(img.mem(), o, lists, slots).snapshotting, 1u);
    Image::put<int64_t>(array + o.flxctr_snapshot, 0);
    // A list that loops short of its head (b to itself), one that leaves memory, a table that is
    // not one (two protections): each ends, counted, keeping what it read.
    Image::put(b + o.dbt_all_next, b);
    r = read_ets_tables(img.mem(), o, lists, slots);
    EXPECT_EQ(r.tables.size(), 2u);
    EXPECT_EQ(r.changed, 1u);
    Image::put(b + o.dbt_all_next, uint64_t{0x10});
    EXPECT_EQ(read_ets_tables(img.mem(), o, lists, slots).changed, 1u);
    Image::put(b + o.dbt_all_next, a);
    Image::put(b + o.dbt_status, kPrivateCatree | 4);
    r = read_ets_tables(img.mem(), o, lists, slots);
    EXPECT_EQ(r.tables.size(), 1u);
    EXPECT_EQ(r.changed, 1u);
    // The same table on two schedulers' lists is read once.
    Image::put(b + o.dbt_status, kPrivateCatree);
    const uint64_t twice[] = {a, b};
    r = read_ets_tables(img.mem(), o, twice, slots);
    EXPECT_EQ(r.tables.size(), 2u);
    EXPECT_EQ(r.changed, 1u);
    // The budget bounds a list of any length.
    EXPECT_EQ(read_ets_tables(img.mem(), o, lists, slots, 1).tables.size(), 1u);
}

// Decentralized counter arrays' slots: the counter groups erts_early_init_cpu_topology() makes
// (the configured CPUs, at most the schedulers and the -dcg limit; one when any is 1), plus one.
TEST(EtsCounterSlots, AsTheVmSizesThem) {
    const std::vector<std::string> none;
    EXPECT_EQ(ets_counter_slots(2, 2, none), 3u);
    EXPECT_EQ(ets_counter_slots(1, 2, none), 2u);
    EXPECT_EQ(ets_counter_slots(8, 4, none), 5u);        // more schedulers than CPUs
    EXPECT_EQ(ets_counter_slots(4, 64, none), 5u);       // +S 4 on 64 CPUs
    EXPECT_EQ(ets_counter_slots(2, 0, none), 3u);        // CPUs unknown: the schedulers
    EXPECT_EQ(ets_counter_slots(512, 512, none), 257u);  // the default limit, 256
    // beam.smp's argv as erl leaves it: +dcgN becomes -dcgN; "-dcg N" is read too; the last wins;
    // init's arguments after "--" are not the emulator's.
    EXPECT_EQ(ets_counter_slots(8, 8, {"beam.smp", "-S", "8", "-dcg1", "--", "-root"}), 2u);
    EXPECT_EQ(ets_counter_slots(8, 8, {"beam.smp", "-dcg", "3", "--"}), 4u);
    EXPECT_EQ(ets_counter_slots(8, 8, {"beam.smp", "-dcg3", "-dcg5", "--"}), 6u);
    EXPECT_EQ(ets_counter_slots(8, 8, {"beam.smp", "--", "-dcg1"}), 9u);
    EXPECT_EQ(ets_counter_slots(8, 8, {"beam.smp", "-dcgx", "-dcg"}), 9u);  // not numbers: the default
}

}  // namespace
