// Who a process blocked in gen:do_call/4 (gen_server:call, gen_statem:call, GenServer.call) is
// waiting for, from what the VM itself holds for the call: do_call monitors the callee
// (erlang:monitor(process, Callee), with an alias from OTP 24 on when it has a timeout) and
// waits for a message tagged with that monitor's reference, so the reference is live in one of
// its frame's Y registers while it waits, and the monitor with that reference, in the process's
// own monitor tree, names the callee's pid (its `other.item`). Both are the VM's bookkeeping
// of this very call: nothing is guessed from names or messages. Only the process itself changes
// its monitor tree, so a process that held still while it was read (same reductions, same
// stack) has the tree it had.
#pragma once
#include <cstdint>
#include <optional>
#include <span>

#include "inspect/process_table.hpp"
#include "target/offsets.hpp"
#include "target/remote_memory.hpp"

namespace bb {

// Monitor tree nodes visited at most per process (a process monitoring more is not named).
constexpr int kMaxMonitorNodes = 4096;

// The pid term (a local pid) of the process `p` monitors under a reference held in
// `leaf_frame` (its leaf frame's Y registers, from its stack); nullopt when no such monitor is
// found, when it names no local process (a remote one, a port), or when a read fails. Bounded:
// at most kMaxMonitorNodes nodes and 8 references of the frame.
std::optional<uint64_t> call_target(const RemoteMemory& mem, const VmOffsets& o, const ProcessEntry& p,
                                    std::span<const uint64_t> leaf_frame);

}  // namespace bb
