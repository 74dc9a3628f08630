// The VM's processes as their Process structs say, read from outside: the process table
// (erts_proc) and each Process with process_vm_readv, one read each. No BPF, nothing stopped,
// nothing written. The copies are racy (a process runs, collects or exits while it is read), so
// every one is checked before it is believed; one that does not verify is counted, not listed.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "target/offsets.hpp"
#include "target/remote_memory.hpp"
#include "target/vm.hpp"

namespace bb {

struct ProcessEntry {
    uint64_t c_p = 0;    // its Process *
    uint64_t pid = 0;    // its pid term
    uint32_t state = 0;  // ERTS_PSFLG_*
    // Words, as process_info/2 counts them: heap_size (the young heap), the old heap, heap
    // fragments (mbuf_sz), and stack_size (hend - stop).
    uint64_t heap_sz = 0, old_heap_sz = 0, mbuf_sz = 0, stack_sz = 0;
    uint64_t heap_span = 0;             // hend - heap: heap_sz, unless a GC abandoned that heap for a new one
    uint64_t reds = 0;                  // reductions up to its last time on a scheduler
    int64_t msgq_len = 0;               // messages in its own queue (sig_qs.len)
    uint64_t reg = 0;                   // its RegProc *, 0 if not registered
    uint64_t reg_name = 0;              // the atom it is registered under (read_process_table() reads it), or 0
    std::array<uint64_t, 3> initial{};  // module, function, arity
    uint64_t current = 0;               // const ErtsCodeMFA *, 0 when the VM has not set it
    uint64_t i = 0;                     // where it runs, or resumes
    // Where its memory is: the young heap [heap, htop), the stack [stop, hend), the old heap
    // [old_heap, old_htop), heap fragments (mbuf), the inner and middle message queues and the
    // dictionary (a ProcDict *).
    uint64_t heap = 0, htop = 0, stop = 0, hend = 0, old_heap = 0, old_htop = 0, mbuf = 0;
    // Received messages whose data is still in their own fragments (erts_save_message_in_proc):
    // a chain of ErtsMessage the next collection merges. The stack and heap point into them.
    uint64_t msg_frag = 0;
    uint64_t sig_first = 0, sig_cont = 0, dictionary = 0;
    uint64_t sig_inq_first = 0;   // the outer queue: signals not yet fetched by the process
    uint64_t abandoned_heap = 0;  // the heap a GC left for a new one (then both are counted)
    uint64_t psd = 0;             // its ErtsPSD *, 0 if none
    uint64_t monitors = 0;        // the root of its monitor tree (ErtsMonLnkNode *), 0 if none
    // The heads of its off-heap lists (erl_off_heap_header *): off_heap.first, and wrt_bins
    // (binaries being appended to).
    uint64_t off_heap = 0, wrt_bins = 0;
    // Bytes outside the Process and its heaps that process_info(P, memory) counts: its queued
    // messages (inner, middle and outer queues: an ErtsMessage each, plus the heap fragments
    // holding data not yet on the heap), its dictionary's array and its ErtsPSD.
    // read_process_table() reads them (add_outside_memory()).
    uint64_t queue_bytes = 0, queued_messages = 0, dict_bytes = 0, psd_bytes = 0;
    // The off-heap binaries it references, as process_info(P, binary) lists them: their count and
    // the sum of their sizes (a binary referenced twice counts twice). Read only when asked
    // (TableReads::binaries, read_binaries()).
    uint64_t binary_count = 0, binary_bytes = 0;

    uint64_t total_heap_sz() const { return heap_sz + old_heap_sz + mbuf_sz; }
    // process_info(P, memory), as erts_process_memory() counts it, without links and monitors
    // (tens of bytes each). `proc_size` is sizeof(Process).
    uint64_t memory(uint32_t proc_size) const {
        return proc_size + 8 * (total_heap_sz() + (abandoned_heap ? heap_span : 0)) + queue_bytes + dict_bytes +
               psd_bytes;
    }
    // process_info(P, status): exiting, garbage_collecting, suspended, running, runnable, waiting.
    const char* status() const;
    // Running, collecting or exiting: its memory changes under a reader.
    bool busy() const;
    // The same memory as `o`, as far as a reader can tell: heap pointers, queues, reductions.
    bool unchanged_since(const ProcessEntry& o) const;
};

struct ProcessTable {
    std::vector<ProcessEntry> processes;  // in process-table order
    size_t unreadable = 0;                // slots whose Process did not verify, or vanished during the read
    // The pid terms of those that hold a live pid: processes whose Process does not read (its
    // heap pointers out of order or past any heap: a torn read, or a lie). At most 1,024.
    std::vector<uint64_t> unreadable_pids;
    size_t partial = 0;  // processes whose queues or dictionary changed while they were read
    // "" when the sizes read right: heap_sz equals hend - heap in most processes (it does but
    // while a GC has abandoned a heap), which a wrong offset for it would not give.
    std::string sizes_mismatch() const;
};

// The T at byte `off` of a copy of the target's memory (a Process, a DbTable), 0 past its end.
template <class T>
T field(std::span<const std::byte> copy, uint32_t off) {
    T v{};
    if (uint64_t{off} + sizeof(T) <= copy.size()) std::memcpy(&v, copy.data() + off, sizeof(T));
    return v;
}

// One copy of a Process (at least o.proc_size bytes), checked: a pid, heap <= htop <= stop <=
// hend, sizes that fit the heap's; nullopt when it is not a live process's.
std::optional<ProcessEntry> parse_process(std::span<const std::byte> proc, uint64_t c_p, const VmOffsets& o);

// Brent's cycle detection over a linked chain (a message queue, heap fragments): true once `p`
// is a node met before (a chain that loops, as only memory that is not what we think it is
// can), in at most about twice the chain's length, with no memory.
class ChainGuard {
public:
    bool loops(uint64_t p) {
        if (p == tortoise_) return true;
        if (++steps_ == power_) {
            tortoise_ = p;
            power_ *= 2;
            steps_ = 0;
        }
        return false;
    }

private:
    uint64_t tortoise_ = 0, power_ = 1, steps_ = 0;
};

// Reads what process_info(P, memory) counts outside the Process and its heaps (the queues, the
// dictionary, the ErtsPSD) into `e`, bounded: at most `max_messages` messages are walked. false
// when a read failed, a queue looped or did not end within the bound (the figures then count
// what was read: a process changing under the reader, or lying).
bool add_outside_memory(const RemoteMemory& mem, const VmOffsets& o, ProcessEntry& e,
                        uint64_t max_messages = 10'000'000);

// One reference to an off-heap binary, as process_info(P, binary) lists it.
struct BinaryHold {
    uint64_t binary = 0;  // its Binary * (process_info's first element: the same for every holder)
    uint64_t bytes = 0;   // orig_size
    uint64_t refc = 0;    // references to it from the whole node: processes, ETS, ports, the VM
};

// Reads the off-heap binaries `e` references into e.binary_count and e.binary_bytes, calling
// `each` (if set) with every one: the ProcBins (OTP 25, 26) or BinRefs (27 on) on its off-heap
// list, its heap fragments' and (from OTP 27) its wrt_bins, as process_info(P, binary) walks
// them; the other nodes of those lists (funs, external pids) are passed over. At most `budget`
// nodes are read in all. false when a read failed, a list looped or did not end within the
// budget (the figures then count what was read).
bool read_binaries(const RemoteMemory& mem, const VmOffsets& o, const TermLayout& t, ProcessEntry& e, uint64_t& budget,
                   const std::function<void(const BinaryHold&)>& each = {});

// What read_process_table() reads besides each Process and what process_info(P, memory) counts.
struct TableReads {
    // Each process's off-heap binaries, read as this term layout has them (the release's); null:
    // not read (they cost a read per binary).
    const TermLayout* binaries = nullptr;
    // With `binaries`: every reference read, with the process holding it (--binaries).
    std::function<void(const ProcessEntry&, const BinaryHold&)> each_binary;
};

// Sets e.reg_name: the atom its RegProc (e.reg) holds, 0 if none or not an atom.
void read_reg_name(const RemoteMemory& mem, const VmOffsets& o, ProcessEntry& e);

// Every process of the VM. UserError if the process table itself cannot be read.
ProcessTable read_process_table(const Vm& vm, const TableReads& reads = {});
// The same from the process table at `erts_proc` (&erts_proc, an ErtsPTab).
ProcessTable read_process_table(const RemoteMemory& mem, const VmOffsets& o, uint64_t erts_proc,
                                const TableReads& reads = {});

}  // namespace bb
