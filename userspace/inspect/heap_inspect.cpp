#include "inspect/heap_inspect.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "base/clock.hpp"

#include "beam_bpf.h"

namespace bb {

namespace {

constexpr int kAttempts = 8;
// Past these a chain is not a process's: a loop, or memory reused under the reader.
constexpr size_t kMaxFragments = 1'000'000, kMaxMessages = 10'000'000, kMaxDictSlots = 1u << 24;

// Where ERTS_MSG_COMBINED_HFRAG says a message's data is: the fragment inside the message.
constexpr uint64_t kCombinedHfrag = 1;

// Copying a process must not take longer than this, whatever its chains say (a real queue of a
// million messages copies in about 3 s here).
constexpr uint64_t kMaxCopyNs = 20'000'000'000;

// The cells a walk over the copy has visited: a bit per word of the copied areas (1/64 of the
// copy), and a set, capped, for cells elsewhere (the literal area). Past the cap a cell outside
// the copy counts as new each time: sized again, never wrong, bounded by the read budget.
class Visited {
public:
    explicit Visited(const HeapSnapshot& s) : s_(s) {
        for (const auto& a : s.areas) bits_.emplace_back((a.bytes.size() / 8 + 63) / 64);
    }
    bool first_visit(uint64_t cell) {
        uint64_t addr = cell & ~uint64_t{7};
        const auto& areas = s_.areas;
        auto it = std::upper_bound(areas.begin(), areas.end(), addr,
                                   [](uint64_t a, const HeapSnapshot::Area& x) { return a < x.addr; });
        if (it != areas.begin()) {
            size_t i = static_cast<size_t>(it - areas.begin()) - 1;
            uint64_t word = (addr - areas[i].addr) / 8;
            if (word < areas[i].bytes.size() / 8) {
                uint64_t& w = bits_[i][word / 64];
                uint64_t bit = uint64_t{1} << (word % 64);
                bool first = !(w & bit);
                w |= bit;
                return first;
            }
        }
        if (elsewhere_.size() >= kMaxElsewhere) return !elsewhere_.count(cell);
        return elsewhere_.insert(cell).second;
    }

private:
    static constexpr size_t kMaxElsewhere = 1'000'000;
    const HeapSnapshot& s_;
    std::vector<std::vector<uint64_t>> bits_;
    std::unordered_set<uint64_t> elsewhere_;
};

bool overlap(const std::vector<HeapSnapshot::Area>& sorted) {
    for (size_t i = 1; i < sorted.size(); i++)
        if (sorted[i].addr < sorted[i - 1].addr + sorted[i - 1].bytes.size()) return true;
    return false;
}

class Copier {
public:
    Copier(const Vm& vm, HeapSnapshot& s, uint64_t max_bytes)
        : vm_(vm), o_(vm.offsets()), s_(s), left_(max_bytes), deadline_(monotonic_ns() + kMaxCopyNs) {}

    // [lo, hi) into the snapshot; false if it cannot be read (the process changed under us).
    bool area(uint64_t lo, uint64_t hi) {
        if (lo >= hi) return true;
        if (lo & 7 || hi - lo > left_)
            throw UserError(fmt::format("the process has more than the {} MiB --inspect copies", max_mib()));
        // Its ends first: an area the Process places where nothing is mapped costs no buffer.
        if (!vm_.mem().read<uint64_t>(lo) || !vm_.mem().read<uint64_t>((hi - 1) & ~7ull)) return false;
        left_ -= hi - lo;
        HeapSnapshot::Area a{lo, std::vector<std::byte>(hi - lo)};
        if (!vm_.mem().read(lo, a.bytes)) return false;
        s_.areas.push_back(std::move(a));
        return true;
    }

    // The heap a collection that could not run left behind (delay_garbage_collection(), erl_gc.c:
    // in a receive, with GC disabled, or waiting for a dirty scheduler to collect a large heap).
    // The process goes on with a new young heap in a fragment, [heap, htop), and its stack copied
    // there, but everything it had built stays in the abandoned heap, where its stack and new
    // heap point, until the next collection. It is heap_sz words (heap_sz is not changed while a
    // heap is abandoned); the words past what was used there are filler or the old stack, copied
    // too rather than trusting the used count the VM keeps in its last word.
    bool abandoned_heap(const ProcessEntry& p) {
        if (!p.abandoned_heap) return true;
        return area(p.abandoned_heap, p.abandoned_heap + 8 * p.heap_sz);
    }

    // A chain of heap fragments: each one's used words.
    bool fragments(uint64_t f) {
        ChainGuard guard;
        for (size_t n = 0; f; n++) {
            if (guard.loops(f)) return false;
            auto next = vm_.mem().read<uint64_t>(f + o_.hfrag_next);
            auto used = vm_.mem().read<uint64_t>(f + o_.hfrag_used_size);
            if (!next || !used || n > kMaxFragments || *used > (1ull << 37) || late(n)) return false;
            if (!area(f + o_.hfrag_mem, f + o_.hfrag_mem + 8 * *used)) return false;
            f = *next;
        }
        return true;
    }

    // The messages of one queue (a chain of ErtsMessage and other signals), with the fragments
    // their data is in; signals that are not messages are skipped. `queued` false: the chain of
    // received messages whose data stays in their fragments until the next collection
    // (Process.msg_frag): their areas are copied (the stack points into them), but they are not
    // the queue's messages.
    bool queue(uint64_t m, bool queued = true) {
        ChainGuard guard;
        for (size_t n = 0; m; n++) {
            if (guard.loops(m)) return false;
            auto next = vm_.mem().read<uint64_t>(m + o_.msg_next);
            auto data = vm_.mem().read<uint64_t>(m + o_.msg_data);
            auto msg = vm_.mem().read<uint64_t>(m + o_.msg_m);
            if (!next || !data || !msg || n > kMaxMessages || late(n)) return false;
            // A signal's tag (or a message's THE_NON_VALUE) is a header word: no term.
            if ((*msg & 3) == 0) {
                if (*msg == 0) s_.undecoded_messages++;
            } else {
                if (queued) s_.messages.push_back(*msg);
                // The fragment inside the message heads a chain like any other: the VM links more
                // fragments to its `next` (erts_factory_close(), save_heap_frag_eterm() of
                // erl_proc_sig_queue.c), and erts_save_message_in_proc() keeps them all.
                uint64_t chain = *data == kCombinedHfrag ? m + o_.msg_hfrag : *data;
                if (chain && !fragments(chain)) return false;
            }
            m = *next;
        }
        return true;
    }

    // The process dictionary: a hash table whose slots are a {Key, Value} tuple or a list of them.
    bool dictionary(uint64_t dict) {
        if (!dict) return true;
        auto used = vm_.mem().read<uint32_t>(dict + o_.pdict_used_slots);
        if (!used || *used > kMaxDictSlots) return false;
        if (8ull * *used > left_)
            throw UserError(fmt::format("the process has more than the {} MiB --inspect copies", max_mib()));
        left_ -= 8ull * *used;
        std::vector<uint64_t> slots(*used);
        if (!vm_.mem().read(dict + o_.pdict_data, std::as_writable_bytes(std::span(slots)))) return false;
        dict_slots_ = std::move(slots);
        return true;
    }
    const std::vector<uint64_t>& dict_slots() const { return dict_slots_; }

    // The bytes of the off-heap (refc) binaries the roots reach, as much of each as the printer
    // reads (`prefix`), into s.binaries; the areas must be copied and sorted. They are read now,
    // while the process holds still, not when printed: by then it may have dropped them and the
    // VM freed (and unmapped) them: a RabbitMQ queue's messages, sized right but printed as
    // '<bad term>' (issue 22), or 1 MiB binaries dropped 300 ms after they came, 6 to 8 of 18
    // messages per copy. Walks the roots as the sizing will, every cell once.
    bool binaries(const term::TermSource& base, uint64_t prefix) {
        term::TermSource src = snapshot_terms(vm_, s_, base);
        Visited visited(s_);
        term::SizeMemo memo;
        memo.first_visit = [&](uint64_t cell) { return visited.first_visit(cell); };
        std::vector<std::pair<uint64_t, uint64_t>> ranges;
        memo.off_heap_data = [&](uint64_t data, uint64_t bytes) {
            bytes = std::min(bytes, prefix);
            if (bytes && data + bytes > data) ranges.emplace_back(data, data + bytes);
        };
        auto walk = [&](uint64_t t) {
            if (term::is_list(t) || term::is_boxed(t)) (void)term::distinct_words(src, t, memo);
        };
        std::vector<uint64_t> stack((s_.hend - s_.stop) / 8);
        if (!s_.read(s_.stop, std::as_writable_bytes(std::span(stack)))) return false;
        for (uint64_t w : stack) walk(w);  // continuation pointers and catches are no list or box
        for (uint64_t slot : dict_slots_) walk(slot);
        for (uint64_t m : s_.messages) walk(m);
        std::sort(ranges.begin(), ranges.end());
        for (size_t i = 0; i < ranges.size();) {  // sub-binaries of one binary overlap: one read
            uint64_t lo = ranges[i].first, hi = ranges[i].second;
            for (i++; i < ranges.size() && ranges[i].first <= hi; i++) hi = std::max(hi, ranges[i].second);
            if (hi - lo > left_)
                throw UserError(fmt::format("the process has more than the {} MiB --inspect copies", max_mib()));
            left_ -= hi - lo;
            HeapSnapshot::Area a{lo, std::vector<std::byte>(hi - lo)};
            if (!vm_.mem().read(lo, a.bytes)) return false;
            s_.binaries.push_back(std::move(a));
        }
        return true;
    }

private:
    uint64_t max_mib() const { return (left_ + s_.bytes_copied()) >> 20; }
    // Checked every 4,096 links of a chain: past the deadline, the copy is given up.
    bool late(size_t n) const {
        if (n % 4096 || monotonic_ns() < deadline_) return false;
        throw UserError(
            fmt::format("copying the process took more than {} s (a chain of over {} messages or "
                        "fragments): too long to inspect",
                        kMaxCopyNs / 1'000'000'000, n));
    }
    const Vm& vm_;
    const VmOffsets& o_;
    HeapSnapshot& s_;
    uint64_t left_;
    uint64_t deadline_;
    std::vector<uint64_t> dict_slots_;
};

std::optional<ProcessEntry> read_entry(const Vm& vm, uint64_t c_p) {
    auto bytes = vm.mem().read_bytes(c_p, vm.offsets().proc_size);
    if (!bytes) return std::nullopt;
    return parse_process(*bytes, c_p, vm.offsets());
}

}  // namespace

// The dictionary's {Key, Value} pairs, read from the snapshot (the tuples are on the heap).
void dictionary_pairs(HeapSnapshot& s, const std::vector<uint64_t>& slots) {
    auto word = [&](uint64_t addr) -> std::optional<uint64_t> {
        uint64_t w;
        if (!s.read(addr, std::as_writable_bytes(std::span(&w, 1)))) return std::nullopt;
        return w;
    };
    auto pair = [&](uint64_t t) {
        auto hdr = term::is_boxed(t) ? word(t - 2) : std::nullopt;
        auto k = word(t + 6), v = word(t + 14);
        if (hdr == term::tuple_header(2) && k && v) s.dictionary.emplace_back(*k, *v);
    };
    for (uint64_t slot : slots) {
        if (term::is_boxed(slot)) {
            pair(slot);
            continue;
        }
        std::unordered_set<uint64_t> seen;  // a bucket whose tail leads back into it ends there
        for (size_t n = 0; term::is_list(slot) && n < 1024 && seen.insert(slot).second; n++) {  // colliding keys
            auto head = word(slot - 1), tail = word(slot + 7);
            if (!head || !tail) break;
            pair(*head);
            slot = *tail;
        }
    }
}

uint64_t HeapSnapshot::bytes_copied() const {
    uint64_t n = 0;
    for (const auto* v : {&areas, &binaries})
        for (const Area& a : *v) n += a.bytes.size();
    return n;
}

namespace {

bool read_areas(const std::vector<HeapSnapshot::Area>& areas, uint64_t addr, std::span<std::byte> dst) {
    auto it = std::upper_bound(areas.begin(), areas.end(), addr,
                               [](uint64_t a, const HeapSnapshot::Area& x) { return a < x.addr; });
    if (it == areas.begin()) return false;
    const HeapSnapshot::Area& a = *--it;
    uint64_t off = addr - a.addr;
    if (off > a.bytes.size() || dst.size() > a.bytes.size() - off) return false;
    std::copy_n(a.bytes.begin() + off, dst.size(), dst.begin());
    return true;
}

}  // namespace

bool HeapSnapshot::read(uint64_t addr, std::span<std::byte> dst) const { return read_areas(areas, addr, dst); }
bool HeapSnapshot::read_binary(uint64_t addr, std::span<std::byte> dst) const {
    return read_areas(binaries, addr, dst);
}

HeapSnapshot snapshot_process(const Vm& vm, uint64_t c_p, uint64_t pid, uint64_t max_bytes,
                              const term::TermSource& terms, uint64_t binary_prefix) {
    // A Process read while its process runs may not verify (its heap pointers move one at a
    // time): that is busy, not gone. Gone is another pid in its place, or never one reading.
    bool seen = false;
    int unread = 0;  // copies that failed while the process did not change: its memory does not read
    for (int attempt = 1; attempt <= kAttempts; attempt++) {
        if (attempt > 1) std::this_thread::sleep_for(std::chrono::milliseconds(5 * attempt));
        auto before = read_entry(vm, c_p);
        if (before && before->pid != pid) throw UserError("the process exited");
        seen |= before.has_value();
        if (!before || before->busy()) continue;
        HeapSnapshot s;
        s.proc = *before;
        s.stop = before->stop;
        s.hend = before->hend;
        s.attempts = attempt;
        Copier copy(vm, s, max_bytes);
        bool ok = copy.area(before->heap, before->htop) && copy.area(before->stop, before->hend) &&
                  copy.area(before->old_heap, before->old_htop) && copy.abandoned_heap(*before) &&
                  copy.fragments(before->mbuf) && copy.queue(before->msg_frag, /*queued=*/false) &&
                  copy.queue(before->sig_first) && copy.queue(before->sig_cont) && copy.dictionary(before->dictionary);
        std::sort(s.areas.begin(), s.areas.end(), [](const auto& a, const auto& b) { return a.addr < b.addr; });
        ok = ok && !overlap(s.areas) && copy.binaries(terms, binary_prefix);
        auto after = read_entry(vm, c_p);
        if (after && after->pid != pid) throw UserError("the process exited");
        if (!after || !after->unchanged_since(*before)) continue;
        if (overlap(s.areas))
            throw UserError("the process's heap areas overlap: its Process does not read right on this build");
        if (!ok) {
            unread++;
            continue;
        }
        s.stack.resize((s.hend - s.stop) / 8);
        s.read(s.stop, std::as_writable_bytes(std::span(s.stack)));
        dictionary_pairs(s, copy.dict_slots());
        return s;
    }
    if (!seen) throw UserError("the process exited, or its Process does not read right on this build");
    if (unread == kAttempts)
        throw UserError(
            fmt::format("the memory its Process points at does not read as a process's (a heap, stack, "
                        "queue or dictionary where nothing is mapped, or a chain that loops) in each "
                        "of {} copies",
                        kAttempts));
    throw UserError(fmt::format("busy, try again: the process ran during each of {} copies of its heap", kAttempts));
}

term::TermSource snapshot_terms(const Vm& vm, const HeapSnapshot& s, term::TermSource src) {
    // The literal area (erts_literals_start, erts_literals_size): constants of loaded code, which
    // no process changes.
    uint64_t lit_lo = vm.mem().read<uint64_t>(vm.symbol_address("erts_literals_start")).value_or(0);
    uint64_t lit_size = vm.mem().read<uint64_t>(vm.symbol_address("erts_literals_size")).value_or(0);
    const RemoteMemory& mem = vm.mem();
    src.read = [&s, &mem, lit_lo, lit_size](uint64_t addr, std::span<std::byte> dst) {
        if (s.read(addr, dst)) return true;
        bool literal = addr >= lit_lo && addr - lit_lo < lit_size && dst.size() <= lit_size - (addr - lit_lo);
        return literal && mem.read(addr, dst);
    };
    src.read_off_heap = [&s](uint64_t addr, std::span<std::byte> dst) { return s.read_binary(addr, dst); };
    return src;
}

const char* kind_name(Root::Kind k) {
    switch (k) {
    case Root::Kind::Stack: return "stack";
    case Root::Kind::Dictionary: return "dictionary";
    case Root::Kind::Message: return "message";
    }
    return "?";
}

namespace {
// A root not sized or printed yet.
Root root(Root::Kind kind, std::string where, std::string function, uint64_t term, uint64_t key = 0) {
    Root r;
    r.kind = kind;
    r.where = std::move(where);
    r.function = std::move(function);
    r.term = term;
    r.key = key;
    return r;
}
}  // namespace

std::vector<Root> root_set(const HeapSnapshot& s, const std::string& current_function,
                           const std::function<std::string(uint64_t)>& function_at) {
    std::vector<Root> roots;
    // The stack from its top: the running function's Y registers, then a continuation pointer
    // (a word with the low bits 00) into the caller, the caller's Y registers, and so on.
    // With frame pointers, a saved frame pointer (an address inside the stack) precedes each.
    std::string function = current_function;
    int y = 0;
    for (uint64_t w : s.stack) {
        if ((w & 3) == 0) {
            if (w >= s.stop && w <= s.hend) continue;  // a saved frame pointer
            function = w ? function_at(w) : "?";
            y = 0;
            continue;
        }
        int slot = y++;
        if (term::is_catch(w)) continue;  // a catch tag: control, not data
        roots.push_back(root(Root::Kind::Stack, fmt::format("y{}", slot), function, w));
    }
    for (const auto& [k, v] : s.dictionary) roots.push_back(root(Root::Kind::Dictionary, "", "", v, k));
    for (size_t i = 0; i < s.messages.size(); i++)
        roots.push_back(root(Root::Kind::Message, fmt::format("#{}", i + 1), "", s.messages[i]));
    return roots;
}

RootSizes size_roots(const HeapSnapshot& s, const term::TermSource& terms, std::vector<Root>& roots,
                     const InspectBudget& budget) {
    RootSizes out;
    Visited visited(s);
    term::SizeMemo memo;
    memo.first_visit = [&](uint64_t cell) { return visited.first_visit(cell); };
    memo.reads_left = budget.max_reads;
    const uint64_t deadline = monotonic_ns() + budget.max_ns;
    auto spent = [&](size_t done) {
        if (memo.reads_left <= 0)
            out.partial = fmt::format("{} reads of the copy spent, {} of {} roots not sized", budget.max_reads,
                                      roots.size() - done, roots.size());
        else if (monotonic_ns() > deadline)
            out.partial = fmt::format("{} s spent, {} of {} roots not sized", budget.max_ns / 1'000'000'000,
                                      roots.size() - done, roots.size());
        return !out.partial.empty();
    };
    // First each cell once (finding what is shared), then the flat sizes, shared cells once.
    size_t marked = 0;
    for (; marked < roots.size() && !spent(0); marked++) {
        Root& r = roots[marked];
        if (auto w = term::distinct_words(terms, r.term, memo)) {
            r.distinct_words = *w;
            out.distinct_words[static_cast<int>(r.kind)] += *w;
        }
    }
    for (size_t i = 0; i < marked && !spent(i); i++) roots[i].size = term::flat_size(terms, roots[i].term, memo);
    return out;
}

std::vector<Root> fold_shared(std::vector<Root> roots, size_t names_kept) {
    std::vector<Root> out;
    std::unordered_map<uint64_t, size_t> first;  // a shared term -> its row in `out`
    for (Root& r : roots) {
        if (term::is_list(r.term) || term::is_boxed(r.term)) {
            auto [it, added] = first.try_emplace(r.term, out.size());
            if (!added) {
                Root& f = out[it->second];
                f.sharers++;
                if (f.first_sharers.size() < names_kept)
                    f.first_sharers.push_back({r.kind, std::move(r.where), std::move(r.function), r.key});
                continue;
            }
        }
        out.push_back(std::move(r));
    }
    return out;
}

}  // namespace bb
