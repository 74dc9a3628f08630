#include "target/vm_globals.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <array>
#include <cstring>
#include <optional>
#include <set>

#include "beam_bpf.h"

namespace bb {
namespace {

constexpr uint64_t kInitPid = 0x3;  // <0.0.0>: pid data 0 under the tag 0011, in every release
// IndexSlot (index.h, the same from 25 to 29): a HashBucket (next, hvalue) then `int index`.
constexpr uint64_t kIndexSlotIndex = 16;
// Atoms 0 to 3 of every release (atom.names): false, true, '_', nonode@nohost.
constexpr std::array<int16_t, 4> kFirstAtomLengths{5, 4, 1, 13};
// Bounds on what the checks walk: no VM has more JIT entries or a larger scheduler element.
constexpr int kMaxJitEntries = 1 << 16;
constexpr uint64_t kMaxEsdSize = 1 << 16;
constexpr uint64_t kMaxReads = 1'000'000;  // about a second of process_vm_readv

// The binary's writable segments, word by word, as read once.
struct Segment {
    uint64_t base;
    std::vector<uint64_t> words;
    std::optional<uint64_t> word_at(uint64_t addr) const {
        if (addr < base || (addr - base) % 8 || (addr - base) / 8 >= words.size()) return std::nullopt;
        return words[(addr - base) / 8];
    }
};

class Scanner {
public:
    explicit Scanner(const GlobalsScan& s) : s_(s), mem_(*s.mem), o_(*s.o) {
        uint64_t budget = kMaxGlobalsScanBytes;
        for (auto [start, end] : s.data) {
            start &= ~7ull;
            Segment seg{start, {}};
            const uint64_t len = std::min(end > start ? end - start : 0, budget);
            budget -= len;
            seg.words.assign(len / 8, 0);
            // Page by page: a page the VM unmapped or protected reads as zeros, which fit nothing.
            for (uint64_t off = 0, n; off + 8 <= len; off += n) {
                n = std::min<uint64_t>(4096 - (start + off) % 4096, len - off) & ~7ull;
                mem_.read(start + off, std::as_writable_bytes(std::span(seg.words.data() + off / 8, n / 8)));
            }
            segs_.push_back(std::move(seg));
        }
        for (const Mapping& m : s.maps)
            if (m.perms.size() >= 2 && m.perms[0] == 'r') readable_.emplace_back(m.start, m.end);
    }

    GlobalsFound run() {
        jit_descriptor();
        process_table();
        for (auto [name, type, count] :
             {std::tuple{"erts_aligned_scheduler_data", BB_SCHED_NORMAL, s_.normal},
              std::tuple{"erts_aligned_dirty_cpu_scheduler_data", BB_SCHED_DIRTY_CPU, s_.dirty_cpu},
              std::tuple{"erts_aligned_dirty_io_scheduler_data", BB_SCHED_DIRTY_IO, s_.dirty_io}})
            scheduler_array(name, uint8_t(type), count);
        atom_table();
        literal_area();
        return std::move(found_);
    }

private:
    // Reads of candidates, at most kMaxReads for the whole search: a binary whose data is all
    // pointers into the VM's memory must not make the attach take minutes. A search cut short
    // proves no candidate the only one, so then nothing is taken (take()).
    template <class T>
    std::optional<T> read(uint64_t addr) {
        if (reads_ >= kMaxReads) return std::nullopt;
        reads_++;
        return mem_.read<T>(addr);
    }
    std::optional<std::vector<std::byte>> read_bytes(uint64_t addr, size_t len) {
        if (reads_ >= kMaxReads) return std::nullopt;
        reads_++;
        return mem_.read_bytes(addr, len);
    }

    // A pointer into readable memory of the VM, aligned to `align`.
    bool pointer(uint64_t v, uint64_t align = 8) const {
        if (v == 0 || v % align) return false;
        auto it = std::upper_bound(readable_.begin(), readable_.end(), std::pair<uint64_t, uint64_t>{v, ~uint64_t{0}});
        return it != readable_.begin() && v < std::prev(it)->second;
    }
    template <class F>
    void each_word(F&& f) const {
        for (const Segment& seg : segs_)
            for (size_t i = 0; i < seg.words.size(); i++) f(seg, seg.base + 8 * i, seg.words[i]);
    }
    // One address for `name` among `candidates` (address -> the value that identifies it): the
    // only candidate, or any of several that all identify the same thing.
    void take(const std::string& name, const std::map<uint64_t, uint64_t>& candidates, const std::string& wanted) {
        std::set<uint64_t> values;
        for (auto [at, value] : candidates) values.insert(value);
        if (reads_ >= kMaxReads)
            found_.why_not[name] = fmt::format(
                "the search for {} stopped after {} reads of the VM's memory (the "
                "binary's data holds too many candidates)",
                wanted, kMaxReads);
        else if (candidates.empty()) found_.why_not[name] = fmt::format("no word of the binary's data is {}", wanted);
        else if (values.size() > 1)
            found_.why_not[name] = fmt::format("{} words of the binary's data could be {}, and they disagree",
                                               candidates.size(), wanted);
        else found_.at[name] = candidates.begin()->first;
    }

    // The list of JIT code entries from `first`: linked both ways, each symfile of kind 0 (the
    // emulator) or 1 (a module), the emulator's once (the first modules are registered before
    // it: it is not the oldest entry).
    bool jit_list(uint64_t first) {
        uint64_t e = first, prev = 0;
        int n = 0, emulators = 0;
        for (; e && n < kMaxJitEntries; n++) {
            auto ent = pointer(e) ? read<std::array<uint64_t, 4>>(e) : std::nullopt;
            if (!ent || (*ent)[1] != prev || (*ent)[3] < 16 || (*ent)[3] > (1u << 30)) return false;
            auto kind = read<uint32_t>((*ent)[2]);
            if (!kind || *kind > 1) return false;
            emulators += *kind == 0;
            prev = e;
            e = (*ent)[0];
        }
        return e == 0 && n >= 2 && emulators == 1;
    }
    void jit_descriptor() {
        std::map<uint64_t, uint64_t> c;
        each_word([&](const Segment& seg, uint64_t at, uint64_t v) {
            // u32 version 1, u32 action_flag (no action, register, unregister), relevant, first
            if (uint32_t(v) != 1 || (v >> 32) > 2) return;
            auto relevant = seg.word_at(at + 8), first = seg.word_at(at + 16);
            if (!relevant || !first || (*relevant % 8) || !pointer(*first)) return;
            if (jit_list(*first)) c[at] = at;
        });
        take("__jit_debug_descriptor", c, "a JIT debugger descriptor whose list holds the emulator's entry");
    }

    void process_table() {
        std::map<uint64_t, uint64_t> c;
        each_word([&](const Segment& seg, uint64_t at, uint64_t tab) {
            if (at < o_.ptab_tab || !pointer(tab)) return;
            const uint64_t ptab = at - o_.ptab_tab;
            auto max_word = seg.word_at((ptab + o_.ptab_max) & ~7ull);
            if (!max_word) return;
            const uint32_t max = uint32_t(*max_word >> (8 * ((ptab + o_.ptab_max) & 7)));
            if (max < 16 || max > (1u << 27)) return;
            auto init = read<uint64_t>(tab);
            if (!init || !pointer(*init)) return;
            if (read<uint64_t>(*init + o_.proc_id) == kInitPid) c[ptab] = ptab;
        });
        take("erts_proc", c, "a process table holding <0.0.0> in slot 0");
    }

    // Element `k` of a scheduler data array at `arr` says it is scheduler k + 1 of `type`: a
    // normal one by `no`, and it holds its own address (aux_work_data.esdp); a dirty one keeps
    // no = 0 and its number in dirty_no, the word after `no` (erl_process.h, 25 to 29).
    bool esd_fits(uint64_t arr, uint64_t k, uint8_t type) {
        const uint64_t esdp = arr + k * o_.aligned_esd_size;
        auto no = read<std::array<uint64_t, 2>>(esdp + o_.esd_no);
        auto t = read<uint32_t>(esdp + o_.esd_type);
        if (!no || !t || *t != type) return false;
        if (type != BB_SCHED_NORMAL) return (*no)[0] == 0 && (*no)[1] == k + 1;
        if ((*no)[0] != k + 1) return false;
        auto all = read_bytes(esdp, o_.aligned_esd_size);
        if (!all) return false;
        for (size_t i = 0; i + 8 <= all->size(); i += 8) {
            uint64_t w;
            std::memcpy(&w, all->data() + i, 8);
            if (w == esdp) return true;
        }
        return false;
    }
    void scheduler_array(const std::string& name, uint8_t type, int count) {
        if (count <= 0) {
            found_.why_not[name] = "the VM has no thread of that kind of scheduler";
            return;
        }
        if (o_.aligned_esd_size == 0 || o_.aligned_esd_size > kMaxEsdSize) {
            found_.why_not[name] = "the offsets give no size of a scheduler's data";
            return;
        }
        std::map<uint64_t, uint64_t> c;
        each_word([&](const Segment&, uint64_t at, uint64_t arr) {
            if (!pointer(arr, 64)) return;  // ErtsAlignedSchedulerData is cache-line aligned
            bool all = true;
            for (int k = 0; k < std::min(count, 256) && all; k++) all = esd_fits(arr, uint64_t(k), type);
            if (all) c[at] = arr;
        });
        take(name, c, fmt::format("a pointer to {} scheduler data elements that name themselves", count));
    }

    // The Atom of index `ix` through an IndexTable's pages at `seg_table`.
    std::optional<uint64_t> atom(uint64_t seg_table, uint64_t ix) {
        auto page = read<uint64_t>(seg_table + 8 * (ix >> 10));  // INDEX_PAGE_SHIFT
        auto a = page && pointer(*page) ? read<uint64_t>(*page + 8 * (ix & 1023)) : std::nullopt;
        return a && pointer(*a) ? a : std::nullopt;
    }
    void atom_table() {
        std::map<uint64_t, uint64_t> c;
        each_word([&](const Segment& seg, uint64_t at, uint64_t) {
            auto entries_word = seg.word_at((at + o_.itab_entries) & ~7ull);
            auto seg_table = seg.word_at(at + o_.itab_seg_table);
            if (!entries_word || !seg_table || o_.itab_seg_table % 8 || !pointer(*seg_table)) return;
            const uint32_t entries = uint32_t(*entries_word >> (8 * ((at + o_.itab_entries) & 7)));
            if (entries < 256 || entries > (1u << 27)) return;
            for (uint64_t ix = 0; ix < kFirstAtomLengths.size(); ix++) {
                auto a = atom(*seg_table, ix);
                if (!a || read<int32_t>(*a + kIndexSlotIndex) != int32_t(ix) ||
                    read<int16_t>(*a + o_.atom_len) != kFirstAtomLengths[ix])
                    return;
            }
            c[at] = at;
        });
        take("erts_atom_table", c, "an index table whose first atoms are false, true, '_' and nonode@nohost");
    }

    // erts_literals_start and erts_literals_size (erl_mmap.c defines them together; 29.1.1's
    // build puts the size first): a range of whole pages that holds the text (a binary
    // literal) of the first atoms.
    void literal_area() {
        const char* start = "erts_literals_start";
        const char* size = "erts_literals_size";
        auto table = found_.at.find("erts_atom_table");
        if (!s_.atom_text_binary || table == found_.at.end()) {
            const char* why = s_.atom_text_binary ? "the atom table was not found"
                                                  : "this release keeps atom text outside it";
            found_.why_not[start] = found_.why_not[size] = why;
            return;
        }
        std::vector<uint64_t> texts;
        auto seg_table = read<uint64_t>(table->second + o_.itab_seg_table);
        for (uint64_t ix = 0; seg_table && ix < kFirstAtomLengths.size(); ix++)
            if (auto a = atom(*seg_table, ix))
                if (auto bin = read<uint64_t>(*a + o_.atom_name); bin && (*bin & 3) == 2) texts.push_back(*bin - 2);
        std::map<uint64_t, uint64_t> c;  // the start's address -> the size's
        each_word([&](const Segment& seg, uint64_t at, uint64_t lo) {
            if (texts.size() != kFirstAtomLengths.size() || lo == 0 || lo % 4096) return;
            for (uint64_t len_at : {at + 8, at - 8}) {
                auto len = seg.word_at(len_at);
                if (!len || *len % 4096 || *len < (1u << 20) || *len > (1ull << 40) || lo + *len < lo) continue;
                if (std::all_of(texts.begin(), texts.end(), [&](uint64_t t) { return t >= lo && t - lo < *len; }))
                    c[at] = len_at;
            }
        });
        if (c.size() == 1 && reads_ < kMaxReads) {
            found_.at[start] = c.begin()->first;
            found_.at[size] = c.begin()->second;
        } else {
            found_.why_not[start] = found_.why_not[size] =
                c.empty() ? "no pair of words of the binary's data is a literal area holding the first atoms' text"
                          : fmt::format("{} pairs of words of the binary's data could be the literal area", c.size());
        }
    }

    const GlobalsScan& s_;
    const RemoteMemory& mem_;
    const VmOffsets& o_;
    std::vector<Segment> segs_;
    std::vector<std::pair<uint64_t, uint64_t>> readable_;  // sorted: /proc/PID/maps is
    GlobalsFound found_;
    uint64_t reads_ = 0;
};

}  // namespace

GlobalsFound find_globals(const GlobalsScan& scan) { return Scanner(scan).run(); }

Result<uint64_t> find_jit_register_code(int fd, const std::vector<ElfSegment>& segments, uint64_t descriptor_vaddr) {
    constexpr uint64_t kMaxCodeBytes = 64ull << 20;  // beam.smp's code is about 5 MiB
    std::set<uint64_t> targets;
    int stores = 0;
    for (const ElfSegment& g : segments) {
        if (!g.executable || g.filesz == 0 || g.filesz > kMaxCodeBytes) continue;
        std::vector<uint8_t> code(g.filesz);
        size_t got = 0;
        while (got < code.size()) {
            ssize_t n = pread(fd, code.data() + got, code.size() - got, off_t(g.offset + got));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            got += size_t(n);
        }
        code.resize(got);
        auto rel32 = [&](size_t at) {
            int32_t v;
            std::memcpy(&v, code.data() + at, 4);
            return int64_t(v);
        };
        // An empty function at link-time address `va` of this segment.
        auto empty = [&](uint64_t va) {
            if (va < g.vaddr || va - g.vaddr + 5 > code.size()) return false;
            const uint8_t* f = code.data() + (va - g.vaddr);
            static constexpr uint8_t endbr_ret[] = {0xf3, 0x0f, 0x1e, 0xfa, 0xc3};
            return f[0] == 0xc3 || std::memcmp(f, endbr_ret, sizeof endbr_ret) == 0;
        };
        for (size_t i = 0; i + 10 <= code.size(); i++) {
            // c7 05 rel32 imm32: mov dword [rip + rel32], imm32 (rip: the next instruction)
            if (code[i] != 0xc7 || code[i + 1] != 0x05) continue;
            const uint64_t va = g.vaddr + i;
            uint32_t imm;
            std::memcpy(&imm, code.data() + i + 6, 4);
            if (va + 10 + rel32(i + 2) != descriptor_vaddr + 4 || (imm != 1 && imm != 2)) continue;
            stores++;
            for (size_t k = i + 10; k + 5 <= code.size() && k < i + 10 + 48; k++)
                if (code[k] == 0xe8) {
                    const uint64_t to = g.vaddr + k + 5 + rel32(k + 1);
                    if (empty(to)) {
                        targets.insert(to);
                        break;
                    }
                }
        }
    }
    if (targets.size() == 1) return *targets.begin();
    return Fail{targets.empty()
                    ? fmt::format("{} stores of the JIT descriptor's action in the code, none followed by a "
                                  "call of an empty function",
                                  stores)
                    : fmt::format("the JIT descriptor's stores are followed by calls of {} different "
                                  "empty functions",
                                  targets.size())};
}

}  // namespace bb
