// beam-bpf-sample -e offcpu: where the VM's threads block (bpf/offcpu.bpf.h), as stacks weighed by
// the nanoseconds blocked. Each stack is the walker's (kernel-free: the walk is made as the system
// call returns), between a root naming the kind of wait and leaves naming the system call:
//   - a scheduler with no process to run: [scheduler idle] (normal or dirty);
//   - the VM's other threads, by their name: [poll thread waiting], [aux thread waiting], ...;
//   - a scheduler blocked while it runs a process: the process's Erlang stack, the C code it
//     called, then [lock] when it waits on a futex (a mutex, a lock's event), then the call;
//   - a scheduler without a process blocked on a lock, choosing what to run next: [scheduler N
//     scheduling], then its C code and the lock.
// A lock is named where the VM's memory or code says which: an ETS table's by the table, a run
// queue's by its scheduler (the futex is the run queue's mutex), a process's lock by the VM's
// function that waits for one (erts_proc_lock_failed, on builds that name their functions).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "inspect/processes.hpp"
#include "run/session.hpp"

namespace bb {

// "futex", "epoll_wait", ... for an x86-64 system call number; "syscall 999" for one not named here.
std::string syscall_name(uint64_t nr);
// The root frame of a VM thread that is not a scheduler, from its name ("0_poller" -> "[poll
// thread waiting]"); unknown names keep their letters: "[thread my_nif_thr]".
std::string thread_wait_frame(std::string_view comm);

class OffcpuStacks {
public:
    explicit OffcpuStacks(Session& s) : s_(s) {}
    // The stack to aggregate, root first: `frames` (the symbolizer's, root first) in its frames.
    void stack(const bb_record& r, std::span<const uint32_t> frames, std::vector<uint32_t>& out);
    // The stack of a block still open at the end (never walked): the thread's kind of wait, then
    // [blocked at the end: not walked] and the system call it is in (/proc/PID/task/TID/syscall).
    void unwalked(uint32_t tid, std::vector<uint32_t>& out);
    // Whether a stack's root frame is one of waiting for work: a scheduler's idle, a service thread's.
    bool idle(uint32_t root) const;

private:
    uint32_t pseudo(const std::string& name);
    // The named lock a futex wait is on, or "" for none known.
    std::string lock_name(const bb_record& r, std::span<const uint32_t> frames);
    std::string ets_lock(const bb_record& r);  // under call_light_bif_shared
    const std::string* run_queue_lock(uint64_t futex);
    const std::string& thread_name(uint32_t tid);
    Session& s_;
    std::unordered_map<uint32_t, std::string> names_;  // tid -> thread name (/proc, as the VM named it)
    std::unordered_map<std::string, uint32_t> frames_;
    std::unordered_map<uint32_t, SchedThread> scheds_;  // tid -> scheduler, for unwalked()
    std::optional<AtomTable> atoms_;                    // ETS tables' names
    std::unordered_set<uint32_t> idle_frames_;          // the roots idle() is true of
    std::unordered_map<uint64_t, bool> ets_export_;     // a BIF's Export entry -> of module ets
    // A run queue's mutex -> "run queue of scheduler 2", ...: read once (the queues live as long
    // as the VM).
    std::optional<std::unordered_map<uint64_t, std::string>> run_queue_locks_;
};

// Records until -d, a signal or the VM's exit; writes the reports. Returns the exit code.
int run_offcpu(Session& s, const CommonOptions& o);

}  // namespace bb
