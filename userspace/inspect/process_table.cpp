#include "inspect/process_table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <tuple>

#include "beam_bpf.h"

namespace bb {

namespace {

// ERTS_PSFLG_* of erl_process.h (the same bits in OTP 25 to 29; beam_bpf.h has the running ones).
constexpr uint32_t kFree = 1u << 10, kExiting = 1u << 11, kActive = 1u << 13, kSuspended = 1u << 16,
                   kGc = BB_PSFLG_GC, kActiveSys = 1u << 20, kDirtyActiveSys = 1u << 28;

// Larger than any real heap (2^37 words = 1 TiB): a field past this is not a size.
constexpr uint64_t kMaxWords = 1ull << 37;

template <class T>
T field(std::span<const std::byte> proc, uint32_t off) {
    T v{};
    if (off + sizeof(T) <= proc.size()) std::memcpy(&v, proc.data() + off, sizeof(T));
    return v;
}

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
        return std::tie(e.pid, e.reds, e.heap, e.htop, e.stop, e.hend, e.old_heap, e.old_htop, e.mbuf, e.mbuf_sz,
                        e.sig_first, e.sig_cont, e.msgq_len, e.dictionary);
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
    e.sig_first = field<uint64_t>(proc, o.proc_sig_first);
    e.sig_cont = field<uint64_t>(proc, o.proc_sig_cont);
    e.dictionary = field<uint64_t>(proc, o.proc_dictionary);
    return e;
}

std::string ProcessTable::sizes_mismatch() const {
    size_t fit = std::count_if(processes.begin(), processes.end(), [](const ProcessEntry& e) { return e.heap_sz == e.heap_span; });
    if (processes.size() < 4 || fit * 2 > processes.size()) return "";
    return fmt::format("heap_sz is the size of the heap in only {} of {} processes", fit, processes.size());
}

ProcessTable read_process_table(const Vm& vm) {
    const VmOffsets& o = vm.offsets();
    const RemoteMemory& mem = vm.mem();
    uint64_t ptab = vm.symbol_address("erts_proc");
    auto tab = mem.read<uint64_t>(ptab + o.ptab_tab);
    auto max = mem.read<uint32_t>(ptab + o.ptab_max);
    if (!tab || !max || *max == 0 || *max > (1u << 27)) throw UserError("cannot read the VM's process table");
    ProcessTable t;
    constexpr uint32_t kChunk = 8192;
    std::vector<uint64_t> slots;
    std::vector<std::byte> proc(o.proc_size);
    for (uint32_t first = 0; first < *max; first += kChunk) {
        slots.resize(std::min(kChunk, *max - first));
        if (!mem.read(*tab + 8ull * first, std::as_writable_bytes(std::span(slots))))
            throw UserError("cannot read the VM's process table");
        for (uint64_t p : slots) {
            if (p == 0) continue;
            // A slot being filled or emptied holds a marker, not a pointer; a process that
            // exits between the two reads is gone.
            std::optional<ProcessEntry> e;
            if (!(p & 7) && mem.read(p, proc)) e = parse_process(proc, p, o);
            if (e && e->reg) {
                auto name = mem.read<uint64_t>(e->reg + o.regproc_name);
                e->reg_name = name && (*name & 0x3f) == 0x0b ? *name : 0;
            }
            if (e) t.processes.push_back(*e);
            else t.unreadable++;
        }
    }
    return t;
}

}  // namespace bb
