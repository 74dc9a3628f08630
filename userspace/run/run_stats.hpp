// The figures of one run: counted by the run loop, printed as the summary line and written
// as --stats JSON (what tests and the bench read).
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <unordered_map>

#include "beam_bpf.h"
#include "profile/sched_states.hpp"
#include "run/options.hpp"
#include "sampling/sampler.hpp"
#include "symbols/symbolizer.hpp"

namespace bb {

struct RunStats {
    uint64_t records = 0;        // handled (after --process)
    double first_record_s = -1;  // from the tool's launch to the first record handled
    uint64_t truncated = 0, unreadable = 0;
    uint64_t not_running = 0;  // a scheduler's stale current_process: the sample stays the scheduler's
    // Attributed to a process whose stack was not walked: being collected, exiting.
    uint64_t in_gc = 0, exiting = 0;
    uint64_t fp_walked = 0;  // stacks read through the frame-pointer chain
    // Native frames in the records, and the walks that stopped short: no row for an address, a
    // rule the walker does not follow, the --native-depth limit; blame decided by the scan.
    uint64_t native_frames = 0, native_no_row = 0, native_bad = 0, native_truncated = 0, blame_scan = 0;
    // -e alloc: words allocated by the code on the records' stacks, and the words of other heap
    // fragments (received messages, NIF environments) counted apart.
    uint64_t alloc_words = 0, message_words = 0;
    uint64_t alloc_samples = 0;  // -e alloc: records of its watchpoints (their words are estimates)
    // ... by the process whose heap they sampled (pid term): how many stand behind the split of
    // each heap's exact words (profile/alloc_strata.hpp). One entry per process sampled.
    std::unordered_map<uint64_t, uint64_t> alloc_samples_by_heap;
    // -e offcpu: ns blocked by VM thread (tid), records and the blocks still open at the end.
    std::unordered_map<uint32_t, uint64_t> offcpu_ns_by_tid;
    uint64_t offcpu_from_ns = 0, offcpu_to_ns = 0;  // ... over this window (CLOCK_MONOTONIC)
    // beam-bpf-sample's CPU profile: the normal schedulers' time by msacc state over the run
    // (profile/sched_states.hpp); empty if not counted.
    std::optional<std::array<double, kSchedStates>> sched_states;
    double seconds = 0;
    double vm_cpu_s = -1;  // CPU time the VM's threads used during the run (-1: unknown)
    bool vm_exited = false;
    bool interrupted = false;
    std::string error;  // what stopped the run early after attach ("" if nothing did)
    std::vector<std::pair<std::string, double>> attach_ms;  // Session::attach_times, for --stats

    void count(const bb_record& r);  // one record handled
};

// "TOOL: N samples ..., N dropped, N truncated, N unsymbolized ..." on stderr.
void print_summary(const RunStats& s, const SamplerCounters& c, const Symbolizer& sym, const char* what);

// --stats FILE: the run's figures as JSON (nothing when o.stats_file is empty).
// `pid_text` names a pid term ("<0.85.0>").
void write_stats(const CommonOptions& o, const RunStats& s, const SamplerCounters& c, const Symbolizer& sym,
                 const std::function<std::string(uint64_t)>& pid_text);

}  // namespace bb
