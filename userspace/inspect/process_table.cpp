#include "inspect/process_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>
#include <tuple>

#include "beam_bpf.h"

namespace bb {

namespace {

// ERTS_PSFLG_* of erl_process.h (the same bits in OTP 25 to 29; beam_bpf.h has the running ones).
constexpr uint32_t kFree = 1u << 10, kExiting = 1u << 11, kActive = 1u << 13, kSuspended = 1u << 16, kGc = BB_PSFLG_GC,
                   kActiveSys = 1u << 20, kDirtyActiveSys = 1u << 28;

// Larger than any real heap (2^37 words = 1 TiB): a field past this is not a size.
constexpr uint64_t kMaxWords = 1ull << 37;

}  // namespace

const char* ProcessEntry::status() const {
    if (state & kExiting) return "exiting";
    if (state & kGc) return "garbage_collecting";
    if (state & kSuspended) return "suspended";
    if (state & (BB_PSFLG_RUNNING | BB_PSFLG_RUNNING_SYS | BB_PSFLG_DIRTY_RUNNING | BB_PSFLG_DIRTY_RUNNING_SYS))
        return "running";
    if (state & (kActive | kActiveSys | kDirtyActiveSys)) return "runnable";
    return "waiting";
}

bool ProcessEntry::busy() const {
    return state & (BB_PSFLG_RUNNING | BB_PSFLG_RUNNING_SYS | BB_PSFLG_DIRTY_RUNNING | BB_PSFLG_DIRTY_RUNNING_SYS |
                    kGc | kExiting);
}

bool ProcessEntry::unchanged_since(const ProcessEntry& o) const {
    auto key = [](const ProcessEntry& e) {
        return std::tie(e.pid, e.reds, e.heap, e.htop, e.stop, e.hend, e.old_heap, e.old_htop, e.abandoned_heap,
                        e.heap_sz, e.mbuf, e.msg_frag, e.mbuf_sz, e.sig_first, e.sig_cont, e.msgq_len, e.dictionary);
    };
    return key(*this) == key(o) && !busy();
}

std::optional<ProcessEntry> parse_process(std::span<const std::byte> proc, uint64_t c_p, const VmOffsets& o) {
    if (proc.size() < o.proc_size) return std::nullopt;
    ProcessEntry e;
    e.c_p = c_p;
    e.pid = field<uint64_t>(proc, o.proc_id);
    e.state = field<uint32_t>(proc, o.proc_state);
    auto heap = field<uint64_t>(proc, o.proc_heap), htop = field<uint64_t>(proc, o.proc_htop);
    auto stop = field<uint64_t>(proc, o.proc_stop), hend = field<uint64_t>(proc, o.proc_hend);
    auto old_heap = field<uint64_t>(proc, o.proc_old_heap), old_hend = field<uint64_t>(proc, o.proc_old_hend);
    auto old_htop = field<uint64_t>(proc, o.proc_old_htop);
    if ((e.pid & 0xf) != 0x3 || (e.state & kFree)) return std::nullopt;
    if (!(heap && heap <= htop && htop <= stop && stop <= hend) || (hend - heap) / 8 > kMaxWords || (heap & 7) ||
        (stop & 7))
        return std::nullopt;
    if (old_heap > old_hend || (old_hend - old_heap) / 8 > kMaxWords) return std::nullopt;
    if (old_heap && !(old_heap <= old_htop && old_htop <= old_hend)) return std::nullopt;
    e.heap_sz = field<uint64_t>(proc, o.proc_heap_sz);
    e.mbuf_sz = field<uint64_t>(proc, o.proc_mbuf_sz);
    // The young heap is [heap, hend) unless a GC left it abandoned, when heap_sz is the new one.
    if (e.heap_sz > kMaxWords || e.mbuf_sz > kMaxWords) return std::nullopt;
    e.old_heap_sz = old_heap ? (old_hend - old_heap) / 8 : 0;
    e.stack_sz = (hend - stop) / 8;
    e.heap_span = (hend - heap) / 8;
    e.reds = field<uint64_t>(proc, o.proc_reds);
    e.msgq_len = field<int64_t>(proc, o.proc_msgq_len);
    e.reg = field<uint64_t>(proc, o.proc_reg);
    for (int k = 0; k < 3; k++) e.initial[k] = field<uint64_t>(proc, o.proc_initial + 8 * k);
    e.current = field<uint64_t>(proc, o.proc_current);
    e.i = field<uint64_t>(proc, o.proc_i);
    e.heap = heap, e.htop = htop, e.stop = stop, e.hend = hend, e.old_heap = old_heap, e.old_htop = old_htop;
    e.mbuf = field<uint64_t>(proc, o.proc_mbuf);
    e.msg_frag = field<uint64_t>(proc, o.proc_msg_frag);
    e.sig_first = field<uint64_t>(proc, o.proc_sig_first);
    e.sig_cont = field<uint64_t>(proc, o.proc_sig_cont);
    e.dictionary = field<uint64_t>(proc, o.proc_dictionary);
    e.sig_inq_first = field<uint64_t>(proc, o.proc_sig_inq_first);
    e.abandoned_heap = field<uint64_t>(proc, o.proc_abandoned_heap);
    e.psd = field<uint64_t>(proc, o.proc_psd);
    e.monitors = field<uint64_t>(proc, o.proc_monitors);
    e.off_heap = field<uint64_t>(proc, o.proc_off_heap);
    e.wrt_bins = field<uint64_t>(proc, o.proc_wrt_bins);
    return e;
}

namespace {

// A live process whose heap pointers did not parse: a copy taken mid-collection, worth reading
// again (a freed slot or one that holds no pid is not).
bool torn(std::span<const std::byte> proc, const VmOffsets& o) {
    return (field<uint64_t>(proc, o.proc_id) & 0xf) == 0x3 && !(field<uint32_t>(proc, o.proc_state) & kFree);
}

// A signal that is not a message carries a tag where a message has its term: a header word of
// subtag EXTERNAL_PID (ERTS_PROC_SIG_MAKE_TAG, erl_proc_sig_queue.h, OTP 25 to 29), which no
// message term can be.
constexpr uint64_t kSignalTagMask = 0x3f, kSignalTag = 0x30;
// ERTS_MSG_COMBINED_HFRAG: the message's data is in the heap fragment inside its ErtsMessage.
constexpr uint64_t kCombinedHfrag = 1;
constexpr int kMaxFragments = 4096;  // heap fragments of one message (a chain built by a NIF)

// The words of the heap fragment chain at `frag` (erts_used_frag_sz()); nullopt when a read fails.
std::optional<uint64_t> fragment_words(const RemoteMemory& mem, const VmOffsets& o, uint64_t frag) {
    uint64_t words = 0;
    ChainGuard guard;
    for (int n = 0; frag; n++) {
        if (n == kMaxFragments || (frag & 7) || guard.loops(frag)) return std::nullopt;
        auto next = mem.read<uint64_t>(frag + o.hfrag_next), used = mem.read<uint64_t>(frag + o.hfrag_used_size);
        if (!next || !used || *used > kMaxWords) return std::nullopt;
        words += *used;
        frag = *next;
    }
    return words;
}

// Adds the messages of the queue starting at `first` (erts_process_memory(): sizeof(ErtsMessage)
// each, and the words of their attached heap fragments); false on a failed read or no end.
bool add_queue(const RemoteMemory& mem, const VmOffsets& o, uint64_t first, uint64_t& budget, ProcessEntry& e) {
    // next, data (a heap fragment, or kCombinedHfrag) and m[0] (the message, or a signal's tag)
    const uint32_t head = std::max({o.msg_next, o.msg_data, o.msg_m}) + 8;
    std::vector<std::byte> buf(head);
    // A queue whose signal is its own next looped here until the budget was spent: 10 million
    // reads, over 30 s (tests/integration/hostile_mem_test.cpp).
    ChainGuard guard;
    for (uint64_t m = first; m; budget--) {
        if (budget == 0 || (m & 7) || guard.loops(m) || !mem.read(m, buf)) return false;
        auto word = [&](uint32_t off) { return field<uint64_t>(buf, off); };
        uint64_t data = word(o.msg_data);
        if ((word(o.msg_m) & kSignalTagMask) != kSignalTag) {
            e.queued_messages++;
            e.queue_bytes += o.msg_size;
            if (data) {
                auto words = fragment_words(mem, o, data == kCombinedHfrag ? m + o.msg_hfrag : data);
                if (!words) return false;
                e.queue_bytes += 8 * *words;
            }
        }
        m = word(o.msg_next);
    }
    return true;
}

}  // namespace

bool add_outside_memory(const RemoteMemory& mem, const VmOffsets& o, ProcessEntry& e, uint64_t max_messages) {
    e.queue_bytes = e.queued_messages = e.dict_bytes = 0;
    e.psd_bytes = e.psd ? o.psd_size : 0;
    bool ok = true;
    if (e.dictionary) {
        // PD_SZ2BYTES(arraySize): the ProcDict and its array, whose first word is in the struct.
        auto size = mem.read<uint32_t>(e.dictionary + o.pdict_array_size);
        if (size && *size <= kMaxWords) e.dict_bytes = o.pdict_data + 8ull * *size;
        else ok = false;
    }
    // The inner queue (received), the middle one (fetched, not yet handled) and the outer one
    // (sent, not yet fetched). process_info(P, memory) counts the inner queue after making P
    // handle all it was sent before the request: every message of the three.
    uint64_t budget = max_messages;
    for (uint64_t first : {e.sig_first, e.sig_cont, e.sig_inq_first}) ok = add_queue(mem, o, first, budget, e) && ok;
    return ok;
}

namespace {

// Larger than any Binary (2^47 bytes, the address space): a size past this is not one.
constexpr uint64_t kMaxBinaryBytes = 1ull << 47;

// Adds the binaries of the off-heap list starting at `first` (erl_bif_info.c's bld_bin_list());
// false on a failed read, a loop, a node that is not one or no end within the budget.
bool add_binaries(const RemoteMemory& mem, const VmOffsets& o, const TermLayout& t, uint64_t first, uint64_t& budget,
                  ProcessEntry& e, const std::function<void(const BinaryHold&)>& each) {
    // thing_word, then next and (for a binary) val, in the node's first words
    std::vector<std::byte> node(std::max<uint32_t>(o.ohh_next, t.refc_val) + 8);
    std::vector<std::byte> bin(std::max(o.bin_refc, o.bin_orig_size) + 8);
    ChainGuard guard;
    for (uint64_t n = first; n; budget--) {
        if (budget == 0 || (n & 7) || guard.loops(n) || !mem.read(n, node)) return false;
        if ((field<uint64_t>(node, 0) & 0x3f) == t.refc_bin) {  // a header word (primary tag 0) of that subtag
            uint64_t val = field<uint64_t>(node, t.refc_val);
            if (!val || (val & 7) || !mem.read(val, bin)) return false;
            BinaryHold h{val, field<uint64_t>(bin, o.bin_orig_size), field<uint64_t>(bin, o.bin_refc)};
            if (h.bytes >= kMaxBinaryBytes || h.refc == 0 || h.refc >= kMaxBinaryBytes) return false;
            e.binary_count++;
            e.binary_bytes += h.bytes;
            if (each) each(h);
        }
        n = field<uint64_t>(node, o.ohh_next);
    }
    return true;
}

}  // namespace

bool read_binaries(const RemoteMemory& mem, const VmOffsets& o, const TermLayout& t, ProcessEntry& e, uint64_t& budget,
                   const std::function<void(const BinaryHold&)>& each) {
    e.binary_count = e.binary_bytes = 0;
    // process_info(P, binary): its own list, each heap fragment's (data built outside the heap
    // that the next collection merges) and, from OTP 27 (the bitstring rework, whose BinRef
    // layout t has), wrt_bins; 25's process_info leaves wrt_bins out.
    bool ok = add_binaries(mem, o, t, e.off_heap, budget, e, each);
    ChainGuard guard;
    for (uint64_t frag = e.mbuf; frag && ok; budget--) {
        if (budget == 0 || (frag & 7) || guard.loops(frag)) return false;
        auto next = mem.read<uint64_t>(frag + o.hfrag_next), first = mem.read<uint64_t>(frag + o.hfrag_off_heap);
        if (!next || !first) return false;
        ok = add_binaries(mem, o, t, *first, budget, e, each);
        frag = *next;
    }
    return ok && (!t.bits_unified() || add_binaries(mem, o, t, e.wrt_bins, budget, e, each));
}

std::string ProcessTable::sizes_mismatch() const {
    size_t fit = std::count_if(processes.begin(), processes.end(),
                               [](const ProcessEntry& e) { return e.heap_sz == e.heap_span; });
    if (processes.size() < 4 || fit * 2 > processes.size()) return "";
    return fmt::format("heap_sz is the size of the heap in only {} of {} processes", fit, processes.size());
}

void read_reg_name(const RemoteMemory& mem, const VmOffsets& o, ProcessEntry& e) {
    auto name = e.reg ? mem.read<uint64_t>(e.reg + o.regproc_name) : std::nullopt;
    e.reg_name = name && (*name & 0x3f) == 0x0b ? *name : 0;  // an atom's tag
}

ProcessTable read_process_table(const Vm& vm, const TableReads& reads) {
    return read_process_table(vm.mem(), vm.offsets(), vm.symbol_address("erts_proc"), reads);
}

ProcessTable read_process_table(const RemoteMemory& mem, const VmOffsets& o, uint64_t ptab, const TableReads& reads) {
    auto tab = mem.read<uint64_t>(ptab + o.ptab_tab);
    auto max = mem.read<uint32_t>(ptab + o.ptab_max);
    if (!tab || !max || *max == 0 || *max > (1u << 27)) throw UserError("cannot read the VM's process table");
    ProcessTable t;
    constexpr uint32_t kChunk = 8192;
    // A process in a collection has its heap pointers rewritten one by one while we read them:
    // the copy is torn (heap past htop, stop past hend) for the few microseconds the scheduler
    // takes, and a spinning process collects often (1 in 50 listings of bb_hostile's lost one).
    // Its struct is read again after a pause, doubled each time (0.1 to 12.8 ms: the scheduler
    // thread can be preempted mid-collection on a loaded machine, and then the heap stays torn
    // for as long as the OS keeps it off its CPU; one listing of bb_hostile's five spinners on a
    // busy CI machine lost one so), within one time budget for the whole table so that a table
    // of garbage costs at most 100 ms more.
    constexpr int kRereads = 8;
    const auto reread_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    std::vector<uint64_t> slots;
    std::vector<std::byte> proc(o.proc_size);
    uint64_t binary_budget = 10'000'000;  // nodes of off-heap lists, all processes'
    for (uint32_t first = 0; first < *max; first += kChunk) {
        slots.resize(std::min(kChunk, *max - first));
        if (!mem.read(*tab + 8ull * first, std::as_writable_bytes(std::span(slots))))
            throw UserError("cannot read the VM's process table");
        for (uint64_t p : slots) {
            if (p == 0) continue;
            // A slot being filled or emptied holds a marker, not a pointer; a process that
            // exits between the two reads is gone.
            std::optional<ProcessEntry> e;
            bool read = false;  // `proc` holds this slot's Process (not the last slot's)
            for (int n = 0; !e && !(p & 7) && (read = mem.read(p, proc)); n++) {
                e = parse_process(proc, p, o);
                if (e || n == kRereads || std::chrono::steady_clock::now() > reread_until || !torn(proc, o)) break;
                std::this_thread::sleep_for(std::chrono::microseconds(100 << n));
            }
            if (e) read_reg_name(mem, o, *e);
            // One budget for every process's binaries: a table of hostile lists ends in bounded time.
            bool whole = e && add_outside_memory(mem, o, *e);
            if (e && reads.binaries) {
                auto each = [&](const BinaryHold& h) { reads.each_binary(*e, h); };
                whole = read_binaries(mem, o, *reads.binaries, *e, binary_budget,
                                      reads.each_binary ? std::function<void(const BinaryHold&)>(each) : nullptr) &&
                        whole;
            }
            if (e && !whole) t.partial++;
            if (e) {
                t.processes.push_back(*e);
            } else {
                t.unreadable++;
                if (read && torn(proc, o) && t.unreadable_pids.size() < 1024)
                    t.unreadable_pids.push_back(field<uint64_t>(proc, o.proc_id));
            }
        }
    }
    return t;
}

}  // namespace bb
