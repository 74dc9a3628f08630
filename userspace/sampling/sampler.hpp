// Samples one VM: gives it a slot in a loaded BPF walker (sampling/walker.hpp: its own, or one
// shared by every VM an agent follows), attaches the walker to the VM's perf events (per thread
// or per CPU) or entry probes (beam-bpf-blame --count, -e alloc), keeps the VM's slot current,
// and hands the records emitted to a callback.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "beam_bpf.h"
#include "sampling/counters.hpp"
#include "target/target_file.hpp"
#include "sampling/alloc_watch.hpp"
#include "native/unwind_table.hpp"
#include "sampling/unwind_maps.hpp"
#include "sampling/walker.hpp"
#include "target/vm.hpp"

namespace bb {

struct SamplerConfig {
    uint64_t frequency_hz = 999;  // used when period_ns == 0
    uint64_t period_ns = 0;       // event period (ns of CPU, or cycles), overrides frequency_hz
    // The hardware cycles event (with the most precise IP the PMU gives) instead of cpu-clock.
    bool cycles = false;
    // Events on each CPU, filtered on the VM in BPF, instead of events on the VM's own threads
    // (followed as threads start): then every process on the machine takes the interrupts.
    bool per_cpu = false;
    uint32_t max_frames = 512;
    // Native frames below the Erlang ones, unwound with these rows (kept current by
    // refresh_vm_state()); null or 0 frames: none. beam-bpf-blame needs the rows to decide.
    NativeUnwind* unwind = nullptr;
    const UnwindMaps* unwind_maps = nullptr;  // where `unwind` places its rows: reused by the walker
    uint32_t max_native_frames = 0;           // unwound below the native leaf (0: the leaf only)
    // --process: only samples whose process's pid term, masked, is this one (dropped in BPF).
    struct OnlyPid {
        uint64_t pid, mask;
    };
    std::optional<OnlyPid> only_pid;
    bool kernel_stacks = false;          // --kernel: the kernel's frames of samples in system calls
    uint32_t ring_bytes = 0;             // 0: sized from the sample rate (ring_bytes_for)
    std::vector<bb_range> blame_ranges;  // non-empty: emit only samples where these run
    struct Probe {
        // The file, as target/target_file.hpp opened it, kept open until the probe is attached:
        // the kernel opens `binary`, its /proc/self/fd/N path, which names that inode only.
        std::shared_ptr<const TargetFile> file;
        std::string binary;  // path as the kernel can open it
        uint64_t file_offset = 0;
        bool heap_alloc = false;  // erts_heap_alloc, for -e alloc (its own program)
        bool gc_return = false;   // -e alloc's watchpoints: a return probe on a GC entry point
    };
    std::vector<Probe> entry_probes;  // non-empty: no perf events, one record per call
    // With entry probes on the VM's GC entry points and erts_heap_alloc: each record carries the
    // words its process allocated (bb_record.alloc_words); records of none are not sent.
    bool alloc = false;
    // -e alloc's stacks from hardware write watchpoints (sampling/alloc_watch.hpp): a sample
    // every this many words on average; 0: at GC entries (-e alloc-gc). The GC entries then
    // give the exact totals only.
    uint64_t alloc_interval = 0;
    bool watchpoints_in_vm = false;  // AllocWatch::Config::in_vm_ok
    // -e offcpu (bpf/offcpu.bpf.h): no perf events; the VM's blocked system calls, those of
    // offcpu_threshold_ns or more kept, shorter ones with probability ns / threshold.
    bool offcpu = false;
    uint64_t offcpu_threshold_ns = 1'000'000;
    bool measure_walk = false;  // time the BPF handler (costs two clock reads a sample)
    int frame_layout = 0;       // the JIT's (JitEmulator): 1 = frame pointers to follow

    // Perf events (on_sample) on each VM thread or CPU, rather than probed functions: what the
    // walker loads and the thread follower attaches both go by it. Not -e offcpu's: with them,
    // 30 to 60 ms of a NIF's 200 sleeps of 10 ms were lost between the blocks' walks and the
    // report; without them the report has every block (docs/offcpu-profiling.md). Likeliest: a
    // CPU sample walked in the timer's interrupt while a system call's return walked a block on
    // that CPU, both building their record in the one per-CPU scratch.
    bool perf_events() const { return entry_probes.empty() && !offcpu; }
};

struct SamplerCounters {
    // The walker's, of this VM's slot: bpf[BB_C_SEEN] (sampling/counters.hpp names them).
    BpfCounters bpf{};
    uint64_t prog_run_cnt = 0;        // the kernel's runs of the program (bpf_stats_enabled), all events
    size_t events = 0;                // perf events open (one per CPU or per VM thread)
    bool perf_events = true;          // SamplerConfig::perf_events(): else no event is meant to open
    std::vector<uint64_t> walk_hist;  // log2(ns) buckets, with measure_walk
    uint64_t handler_errors = 0;      // records the handler threw on (counted, skipped)
    std::string first_handler_error;
    std::string code_events_off;                    // why code events are not followed, empty if they are
    std::optional<AllocWatchCounters> alloc_watch;  // -e alloc's watchpoints (their traps: bpf[BB_C_WATCH_*])
};

class Sampler {
public:
    // Samples `vm` through `walker` (loaded with a config like `cfg`: the events and probes are
    // this Sampler's), or through a walker of its own if none. Throws UserError with a one-line
    // reason (privileges, kernel support, bad config, no slot left).
    Sampler(const Vm& vm, const SamplerConfig& cfg, std::shared_ptr<Walker> walker = nullptr);
    ~Sampler();
    Sampler(const Sampler&) = delete;
    Sampler& operator=(const Sampler&) = delete;

    // Re-reads what can change while the VM runs: JIT code mappings, scheduler threads, and
    // (per-thread events) threads started since the last call.
    void refresh_vm_state();
    // The atoms '$initial_call' and '$callers' of this VM (ProcessNames::dictionary_keys()):
    // from then on the walker reads those entries of a sampled process's dictionary.
    void set_dictionary_keys(uint64_t initial_call, uint64_t callers);
    // Drains the walker's ring buffer (Walker::poll), waiting up to `timeout` for data. Returns
    // records handled. While events are on, a drain ends after about `timeout` even if the walker
    // writes faster than the handler reads, so the caller keeps control; after stop_events() it
    // empties the ring. A shared walker's ring holds every VM's records: drain it there instead.
    using Handler = std::function<void(const bb_record&)>;
    size_t poll(std::chrono::milliseconds timeout, const Handler& on_record);
    // Detaches the program from every event: records already in the ring are all that is
    // left, so a final poll() accounts for every record the walker emitted for this VM.
    void stop_events();
    // This VM's slot in the walker.
    uint32_t slot() const;
    SamplerCounters counters() const;
    // -e offcpu: the VM's threads whose blocked time is not in a record yet (blocked now, or
    // woken in a system call that has not returned), each with that time up to `now_ns`; the
    // entries are cleared. For the end of a run: those blocks are never walked.
    std::vector<std::pair<uint32_t, uint64_t>> take_unrecorded_blocks(uint64_t now_ns);
    // Why the events are per CPU when per-thread ones were asked for (more VM threads than
    // descriptors), for the attach line; "" otherwise.
    const std::string& events_note() const;

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace bb
