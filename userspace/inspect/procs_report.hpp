// What beam-bpf-procs prints: the process table (a snapshot, or its growth every interval with
// --watch) and one process's heap (--inspect), as text or JSON on stdout.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "inspect/process_table.hpp"
#include "inspect/processes.hpp"
#include "target/vm.hpp"

namespace bb {

struct ProcsOptions {
    std::string sort = "memory";  // memory, binary, heap, stack, queue, reductions (the tool checks it)
    size_t top = 20;
    bool all = false, json = false;
    double watch = 0;  // seconds per interval; 0: one snapshot
    size_t count = 0;  // --watch intervals (0: until interrupted)
    std::string inspect, syntax = "auto";
    int depth = 20;
    size_t width = 120;
    size_t columns = 0;  // the terminal's width: the tables fit it (0: piped, no limit)
    uint64_t max_heap_mib = 1024;
    bool stacks = false;    // --stacks
    bool binaries = false;  // --binaries
    bool ets = false;       // --ets
};

// What the tool has to name processes and the code they are in.
struct ProcsContext {
    const Vm& vm;
    ProcessNames& names;
    // The VM's name of the JIT code range `addr` is in (the symbolizer's), nullopt if none.
    std::function<std::optional<std::string>(uint64_t addr)> jit_name;
    bool raw_names;
    // The stub at the bottom of every Erlang stack (the JIT's emulator symfile), 0 if unknown.
    uint64_t normal_exit = 0;

    // The function the ErtsCodeMFA at `mfa` names, else the one `addr` is in ("" if neither).
    std::string function(uint64_t mfa, uint64_t addr);
};

// The table, largest first by --sort.
int procs_table(ProcsContext& c, const ProcsOptions& o);
// --watch: the table again every interval, ranked by what grew in it.
int procs_watch(ProcsContext& c, const ProcsOptions& o);
// --inspect: the terms one process holds, biggest first.
int procs_inspect(ProcsContext& c, const ProcsOptions& o);
// --stacks: every process's stack, processes with the same state and frames grouped, the
// biggest group first (inspect/procs_stacks.cpp).
int procs_stacks(ProcsContext& c, const ProcsOptions& o);

// --binaries: the node's off-heap binaries, biggest first, each with the processes holding it;
// then the processes by the bytes of binaries they reference (inspect/procs_binaries.cpp).
int procs_binaries(ProcsContext& c, const ProcsOptions& o);

// --ets: every ETS table, biggest first; with --watch, what each gained per interval
// (inspect/procs_ets.cpp).
int procs_ets(ProcsContext& c, const ProcsOptions& o);

// The process table, checked for sizes that read right on this build (UserError if not).
ProcessTable read_checked_table(const Vm& vm, const TableReads& reads = {});

}  // namespace bb
