// Turns a record's addresses into locations of the frame table, root first: Erlang frames from the JIT's
// own symbols, the leaf from JIT or native symbols, "[kernel]" for system-call time.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "beam_bpf.h"
#include "profile/frames.hpp"
#include "profile/sched_states.hpp"
#include "symbols/jit_code.hpp"
#include "native/native_symbols.hpp"
#include "native/unwind_table.hpp"
#include "target/vm.hpp"

namespace bb {

struct FrameOptions {
    bool only_erlang = false;  // drop native and kernel frames
    bool raw_names = false;    // the VM's atoms ("'Elixir.Foo':bar/1"), not Elixir's names
};

class Symbolizer {
public:
    // What a VM thread that runs no process or port does, as msacc counts it (its states port:
    // a port task whose port is not known, check_io, aux, sleep, and other: the scheduler's loop).
    enum class Service { none, port, check_io, aux, sleep, scheduling };
    Symbolizer(const Vm& vm, FrameOptions opt);

    // Re-reads the JIT's module list when a second has passed since the last time; samples
    // taken before `now_ns` still resolve to code purged since. Call before handling records
    // drained after `now_ns`. A lookup that misses refreshes sooner (new code).
    void refresh(uint64_t now_ns);
    // A BB_WHERE_CODE_EVENT record: the exact instant of a code load or purge; a new
    // module's symbols are read at once, while they still exist.
    void code_event(const bb_record& r);
    // Whether every code event reaches code_event() (the probe is attached and none was lost):
    // then they alone keep the index current. Turning it on re-reads the module list once.
    void follow_code_events(bool on, uint64_t now_ns);
    // Root-first location ids of `r` into `out` (cleared): Erlang frames, then native ones,
    // then the kernel's. Empty when nothing is left to show.
    void frames(const bb_record& r, std::vector<uint32_t>& out);
    // The msacc state of a normal scheduler's record whose frames() are `stack`: a process's
    // (emulator; gc where the collector is on its stack, port in a driver's output callback), a
    // port task's, or the VM's own work by the root frames() gave it. Needs the native frames
    // (not with only_erlang).
    SchedState sched_state(const bb_record& r, std::span<const uint32_t> stack);
    // The unwind tables the sampler uses: they name native functions that have no symbol
    // ("beam.smp+0x1a2b30", the start of the function's FDE) and tell native code from JIT code.
    void set_unwind(const NativeUnwind* u) { unwind_ = u; }
    const NativeUnwind* unwind() const { return unwind_; }

    const FrameTable& frames() const { return frames_; }
    // A frame of the VM's own that no address names: -e wall's process states ("[waiting]")
    // and what a process waits on ("[receive, queue 0]").
    uint32_t pseudo_frame(const std::string& name) { return frames_.other(FrameKind::vm, name, "beam.smp"); }
    const std::optional<JitEmulator>& emulator() const { return jit_.emulator(); }
    const JitCodeIndex& jit() const { return jit_; }
    uint64_t unsymbolized() const { return unsymbolized_; }
    // -e alloc: where a heap's exact words go when no watchpoint sampled it (profile/alloc_strata.hpp).
    uint32_t unsampled_alloc() const { return unsampled_alloc_; }

private:
    uint32_t erlang_frame(uint64_t addr, uint64_t t, bool return_address);
    std::optional<uint32_t> native_frame(uint64_t ip);
    uint32_t kernel_frame(uint64_t ip);
    bool in_native_module(uint64_t addr) const;
    uint32_t truncated_frame(uint32_t skipped);  // "[truncated N frames]", between leaf-most and root-most
    uint32_t port_frame(const bb_record& r);     // "[port tcp_inet]": a port task's root (BB_F_PORT)
    // Names seen -> their frames; the frame table interns any further ones (a hostile VM's
    // thousands of names cost it, not this map).
    static constexpr size_t kMaxPortFrames = 256;
    std::unordered_map<std::string, uint32_t> port_frames_;
    // The root of a stack of no process or port: the VM's work it does ("[check_io]"), else
    // "[no Erlang process]"; and for each location seen, what work it is.
    uint32_t service_root(const std::vector<uint32_t>& stack);
    std::unordered_map<uint32_t, Service> service_of_;
    // Location -> the msacc state a process's sample is in when it is on its stack: gc (one of
    // the VM's ways into the collector), port (a driver's output), else emulator.
    std::unordered_map<uint32_t, SchedState> process_state_;
    std::array<uint32_t, 6> service_frames_{};
    const NativeUnwind* unwind_ = nullptr;
    KernelSymbols kernel_syms_;
    std::unordered_map<uint64_t, uint32_t> kernel_cache_;

    const Vm& vm_;
    FrameOptions opt_;
    JitCodeIndex jit_;
    NativeSymbols native_;
    FrameTable frames_;
    void reread_jit(uint64_t now_ns);
    uint64_t jit_generation_ = ~0ull;
    bool code_events_ = false;
    uint64_t last_refresh_ns_ = 0, now_ns_ = 0;
    // Address -> location id, for samples taken in [from, until): code at an address changes.
    // Erlang entries die with the JIT index's generation.
    struct Cached {
        uint32_t id;
        uint64_t from, until;
    };
    std::unordered_map<uint64_t, Cached> cp_cache_, leaf_cache_;
    std::unordered_map<uint64_t, uint32_t> native_cache_;
    uint64_t unsymbolized_ = 0;
    std::map<uint64_t, std::pair<uint64_t, uint32_t>> native_ranges_;  // start -> (end, id)
    std::unordered_set<uint64_t> native_misses_;                       // in no module, as of the last re-read
    uint64_t last_native_refresh_ns_ = 0;
    uint32_t unknown_jit_, unknown_native_, kernel_, no_process_, bad_process_;
    uint32_t in_gc_, exiting_, beyond_scan_;
    uint32_t unsampled_alloc_;  // roots of a process's samples taken while it was collected or exiting
};

}  // namespace bb
