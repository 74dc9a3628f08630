// beam-bpf-sample -e wall: a wall-clock profile of every Erlang process, from user space, with
// no BPF. Each tick reads the process table's slots (one read of 8 bytes per slot), picks a
// uniform random subset of the live processes, and reads each one's Process and stack
// (inspect/process_stack.hpp). Each process read stands for (live processes / processes read)
// times the time since the last tick, so the profile's weights add up to an unbiased estimate
// of the process-seconds spent in each (state, stack). Only reads, never a write or a pause.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <random>
#include <span>
#include <string_view>
#include <vector>

#include "inspect/process_stack.hpp"

namespace bb {

// -e wall's defaults: 20 ticks a second, 64 processes read a tick. 1,280 processes read a
// second give a share's 3 standard deviations under 3 points in 10 s of profile (a share p of
// n samples has sd sqrt(p(1-p)/n): 1.4 points at p = 0.5, n = 1,280), at a cost measured in
// docs/performance.md.
constexpr uint64_t kWallHz = 20;
constexpr uint32_t kWallProcessesPerTick = 64;
// Words of stack read per tick, over every process read (2 MiB): past it, the tick's other
// processes are profiled by state and function without their stacks.
constexpr uint64_t kWallWordsPerTick = uint64_t{1} << 18;
// Process table slots read per tick (2 MiB): the whole table each tick up to 262,144 slots (the
// VM's default +P up to OTP 25; 27 and 29 default to 1,048,576), a larger one in turns: its
// chunks are read round the table, the rest kept from their last read (at most table/slots
// ticks old: 4 for a million slots). A process that ended since is found gone when read (left
// out, counted); one that started since waits for its chunk's turn. At a million processes a
// whole read each tick cost the tool 10.6% of a core (330 MB/s of a 2M-slot table), turns 2.6%
// (bench/wall.py).
constexpr uint32_t kWallSlotsPerTick = 262'144;

// `k` distinct indexes of [0, n), uniformly (a partial Fisher-Yates shuffle of [0, n)); all of
// them when k >= n. Pure but for `rng`.
std::vector<uint32_t> pick_uniform(uint32_t n, uint32_t k, std::mt19937_64& rng);

// One process the tick read.
struct WallProcess {
    ProcessStack stack;     // its outcome: read, busy (running, collecting, exiting), or a drop
    bool not_read = false;  // the tick's word budget was spent: its state and function only
    // Waiting in a monitored call (gen:do_call/4, ...): whom it calls (inspect/call_target.hpp).
    enum class Call { none, named, unknown } call = Call::none;
    // Call::named: the callee's pid, and when its Process read, its Process (c_p != 0; its
    // registered name read).
    ProcessEntry callee;
};

struct WallTick {
    // Processes in the table (slots holding a Process pointer), as the chunks' last reads found it.
    uint32_t live = 0;
    std::vector<WallProcess> processes;
    // Of the processes picked: exited before they were read, or caught mid-change (a torn
    // Process, a stack that moved during both reads, a stack that did not read). They are
    // left out; the others' weights cover their share (each read process weighs live / kept).
    uint32_t exited = 0, changed = 0, unreadable = 0;
    // Of the processes waiting in a monitored call: whose callee was named, and not.
    uint32_t calls_named = 0, calls_unknown = 0;
    uint64_t slot_bytes = 0, process_reads = 0, words = 0;  // what the tick read of the target
    // The processes profiled (read or busy, with or without their stacks).
    uint32_t kept() const { return static_cast<uint32_t>(processes.size()); }
};

// The process table's slots, as the tick reads them: &erts_proc's tab and max.
struct ProcessTableRef {
    uint64_t tab = 0;
    uint32_t max = 0;
};
// UserError when the table cannot be read.
ProcessTableRef process_table_ref(const RemoteMemory& mem, const VmOffsets& o, uint64_t erts_proc);

// The functions of OTP 25 to 29 that monitor the process they call, send it the request and
// wait in their own receive for its reply or its 'DOWN' (the reference live in a Y register of
// their frame while they wait), as the VM names them: gen_server, gen_statem and gen_event
// calls (gen:do_call/4), dets' requests to a table's server (dets:req/2: dets:insert/2,
// lookup/2, ...), io requests to an I/O server (io:execute_request/3: io:format/2 to a slow
// group leader, file:read/2 on a file's server), disk_log's (disk_log:monitor_request/2) and
// the code server's (code_server:call/1: code loading). Checked against their sources.
inline constexpr std::string_view kMonitoredCalls[] = {"gen:do_call/4", "dets:req/2", "io:execute_request/3",
                                                       "disk_log:monitor_request/2", "code_server:call/1"};

struct WallConfig {
    uint32_t per_tick = kWallProcessesPerTick;
    uint64_t words_per_tick = kWallWordsPerTick;
    uint32_t slots_per_tick = kWallSlotsPerTick;
    uint64_t seed = std::random_device{}();
    // True when `addr` is in the code of a function that monitors the process it calls before
    // it waits for the reply (gen:do_call/4 and the others of kMonitoredCalls): a process
    // waiting there is in a call, whose callee its monitor names.
    std::function<bool(uint64_t addr)> in_monitored_call;
    // The process-table slot of a pid term (Vm::process_slot()).
    std::function<uint64_t(uint64_t pid)> slot_of;
};

class WallSampler {
public:
    WallSampler(const RemoteMemory& mem, const VmOffsets& o, ProcessTableRef table, CodeView code, WallConfig cfg);
    // Only this process (--process): the table is not read, its Process is (c_p from the
    // table, found once by the caller). A process that exited is kept out (exited = 1).
    void only(uint64_t c_p, uint64_t pid) { only_ = {c_p, pid}; }
    // One tick: UserError if the table's slots do not read (the VM is gone).
    WallTick tick();

private:
    // Into the tick: with its registered name, which names it, and whom it calls if it waits
    // in gen:do_call/4.
    void keep(WallTick& t, WallProcess w);
    // The callee of a process waiting in gen:do_call/4 (read, not running).
    void find_callee(WallTick& t, WallProcess& w);
    // A copy of the process `pid` (its registered name read), found in its slot; nullopt if the
    // slot holds another process or none.
    std::optional<ProcessEntry> process_of(uint64_t pid);

    const RemoteMemory& mem_;
    const VmOffsets& o_;
    StackReads reads_;
    ProcessTableRef table_;
    CodeView code_;
    WallConfig cfg_;
    std::mt19937_64 rng_;
    std::optional<std::pair<uint64_t, uint64_t>> only_;
    static constexpr uint32_t kSlotChunk = 8192;
    std::vector<uint64_t> slots_;
    // The live Process pointers of each chunk of the table, as its last read found them, and
    // where each chunk's end falls when they are laid end to end.
    std::vector<std::vector<uint64_t>> chunks_;
    std::vector<uint64_t> ends_;
    uint32_t next_chunk_ = 0;
};

}  // namespace bb
