// The loaded BPF walker (bpf/beam_walk.bpf.c): its programs, maps and ring buffer, and the VMs
// it samples, a slot each (struct bb_vm: the build's offsets, JIT code, unwind modules, looked
// up by the sampled thread's tgid). beam-bpf-sample loads one for its one VM; beam-bpf-agent one
// for every VM of the host, of whatever release and build. The events and probes that feed it
// are each VM's Sampler's (sampling/sampler.hpp).
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <sys/types.h>
#include <string>
#include <vector>

#include "base/unique_fd.hpp"
#include "beam_bpf.h"
#include "sampling/counters.hpp"

struct beam_walk;
struct bpf_program;

namespace bb {

struct SamplerConfig;

class Walker {
public:
    // Loads the walker with what every VM it samples shares (`cfg`'s frame limits, events,
    // -e alloc, blame ranges, --process, native unwind maps) and room for `slots` VMs. Throws
    // UserError with a one-line reason (privileges, kernel support).
    Walker(const SamplerConfig& cfg, uint32_t slots);
    ~Walker();
    Walker(const Walker&) = delete;
    Walker& operator=(const Walker&) = delete;

    // A VM to sample: its slot (its counters start at 0). UserError when every slot is taken.
    uint32_t add_vm(const bb_vm& vm);
    // Rewrites a VM's slot while it is sampled (more JIT code, more unwind modules): append only.
    void update_vm(uint32_t slot, const bb_vm& vm);
    // The VM is no longer sampled; its slot is free for another.
    void remove_vm(uint32_t slot);
    uint32_t vms() const;  // slots taken

    // Drains the ring buffer, waiting up to `timeout` for data, handing each record (of any VM:
    // bb_record.tgid says which) to `on_record`. Returns records handled. A handler that throws
    // loses that record only (counted); a ring error throws UserError. Unless `until_empty`, a
    // drain ends after about `timeout` even if the walker writes faster than the handler reads
    // (the ring then fills and the kernel counts drops), so the caller keeps control.
    using Handler = std::function<void(const bb_record&)>;
    size_t poll(std::chrono::milliseconds timeout, const Handler& on_record, bool until_empty);

    // The per-CPU counters of one slot, summed.
    BpfCounters counters(uint32_t slot) const;
    std::vector<uint64_t> walk_hist() const;  // with measure_walk, all slots
    uint64_t prog_run_cnt() const;            // the kernel's runs of the sampling program
    uint64_t handler_errors() const;
    const std::string& first_handler_error() const;

    beam_walk* skel() const;
    bool fast() const;  // the may_goto programs (kernel 6.9+) were loaded
    bpf_program* on_sample() const;
    bpf_program* on_call() const;
    bpf_program* on_heap_alloc() const;
    bpf_program* on_sys_exit() const;  // -e offcpu's (with on_switch and on_wakeup)
    // -e alloc's collections probed by one uprobe session each (kernel 6.13+), instead of an
    // entry and a return probe: attach_gc_session() links one (closing it detaches it; a
    // negative descriptor and errno when it cannot).
    bool gc_sessions() const;
    UniqueFd attach_gc_session(const std::string& binary, uint64_t file_offset, pid_t pid) const;
    int sched_threads_fd() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace bb
