// What beam-bpf-sample and beam-bpf-blame share: options, privilege checks, the run loop
// (drain -> symbolize -> aggregate until -d, Ctrl-C or the VM's exit) and the summary.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <string>

#include "aggregate.hpp"
#include "processes.hpp"
#include "report/report.hpp"
#include "sampler.hpp"
#include "symbolizer.hpp"
#include "vm.hpp"

namespace bb {

struct CommonOptions {
    int pid = 0;
    uint64_t frequency = 999;
    uint64_t period_ns = 0;
    bool per_cpu = false;        // one event per CPU instead of one per VM thread
    std::string event = "cpu-clock";  // or "cycles" (a hardware PMU)
    double duration = 0;      // 0: until Ctrl-C
    size_t top = 20;
    std::string format = "top";  // report/report.hpp, comma-separated; --folded: --format folded
    bool folded = false;
    bool lines = false;
    bool raw_names = false;
    bool only_erlang = false;
    uint32_t max_depth = 512;
    uint32_t native_depth = 64;  // native frames unwound per sample (0: the leaf only)
    bool kernel = false;         // the kernel's frames of samples in system calls
    std::string output;       // empty: stdout
    std::string offsets_file;
    std::string process;      // "<0.85.0>" or a registered name: only this Erlang process
    bool by_process = false;  // a root frame per process: name, then pid
    std::string stats_file;   // JSON figures of the run, for scripts/bench.sh
    double every = 0;         // --every: one report per this many seconds, -o names them by %t
};

void add_common_options(CLI::App& app, CommonOptions& o);
// Checks -F/--period/--max-depth/--process beyond what CLI11 can; throws UserError.
void validate(const CommonOptions& o);
SamplerConfig sampler_config(const CommonOptions& o);
// A native function of the VM found by name: FUNC in beam.smp first, then in the libraries the
// VM has mapped (libc, NIF libraries); as a prefix unless `exact`. UserError naming the closest
// names when none matches.
struct NativeMatch {
    ElfSymbol sym;
    std::string file;    // as mapped in the target
    uint64_t start = 0;  // runtime address
};
std::vector<NativeMatch> resolve_functions(const Vm& vm, const std::string& func, bool exact);
// An entry probe on it, for SamplerConfig::entry_probes.
SamplerConfig::Probe entry_probe(const Vm& vm, const NativeMatch& m);
// "512 B", "37 KiB", "12 MiB": whole units, up to 10 of the next.
std::string human_bytes(uint64_t bytes);
// The VM's GC entry points (exact names), which -e alloc probes.
const std::vector<std::string>& gc_entry_points();
// "cpu-clock 999 Hz per VM thread", for the attach line.
std::string describe_event(const CommonOptions& o);
// Root, or the three capabilities; UserError naming the missing ones otherwise.
void check_privileges();
// The formats of --format ("top", or several: "html,pprof"); throws UserError.
std::vector<Format> formats_of(const CommonOptions& o);
// Where each format goes: -o FILE or stdout for one, -o PREFIX plus file_suffix() for
// several; "%t" in -o is the report's start time (UTC, 20261123T101500Z). Opened before
// attaching so a bad path fails fast; with --every, open() again for each interval.
class Output {
public:
    explicit Output(const CommonOptions& o);
    const std::vector<Format>& formats() const { return formats_; }
    bool has(Format f) const;
    void open(uint64_t start_unix_ns);
    std::ostream& stream(Format f);
    const std::vector<std::string>& paths() const { return paths_; }

private:
    std::string pattern_;
    std::vector<Format> formats_;
    std::vector<std::string> paths_;
    std::vector<std::unique_ptr<std::ofstream>> files_;  // one per format, or none: stdout
};

// What both tools do before they differ: check the options and privileges, open the output,
// attach to the VM and read its symbols; then start() loads and attaches the BPF side.
// Built in place: the symbolizer and sampler keep references to the Vm.
class Session {
public:
    explicit Session(const CommonOptions& o);
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
    // `what` ends the "beam-bpf: attached ..." line (how it samples).
    void start(SamplerConfig cfg, const std::string& what);

    Output out;
    Vm vm;
    Symbolizer sym;
    ProcessNames names;
    std::optional<uint64_t> only_pid;  // --process, as a pid term
    std::optional<NativeUnwind> unwind;  // native unwind tables, when native frames are walked
    std::optional<Sampler> sampler;
    uint64_t start_ns = 0, start_unix_ns = 0;  // monotonic and wall clock when sampling started
};

// "scheduler 3", "dirty cpu scheduler 1".
std::string sched_name(uint8_t type, uint16_t no);


struct RunStats {
    uint64_t records = 0;     // handled (after --process)
    double first_record_s = -1;  // from the tool's launch to the first record handled
    uint64_t truncated = 0, unreadable = 0;
    uint64_t not_running = 0; // a scheduler's stale current_process: the sample stays the scheduler's
    uint64_t fp_walked = 0;   // stacks read through the frame-pointer chain
    // Native frames in the records, and the walks that stopped short: no row for an address, a
    // rule the walker does not follow, the --native-depth limit; blame decided by the scan.
    uint64_t native_frames = 0, native_no_row = 0, native_bad = 0, native_truncated = 0, blame_scan = 0;
    // -e alloc: words allocated by the code on the records' stacks, and the words of other heap
    // fragments (received messages, NIF environments) counted apart.
    uint64_t alloc_words = 0, frag_words = 0;
    double seconds = 0;
    bool vm_exited = false;
    bool interrupted = false;
    std::string error;        // what stopped the run early after attach ("" if nothing did)
};

// Who ran a sample: its process if the walker attributed it to one, and its scheduler.
inline Who who_of(const bb_record& r) {
    return {(r.flags & BB_F_PROC) ? r.erl_pid : 0,
            r.sched_type == BB_SCHED_NONE ? 0u : uint32_t{r.sched_type} << 16 | r.sched_no};
}

// Aggregates the run's samples and writes them in --format: at the end, or with --every at
// the end of each interval (then forgets them: memory stays flat however long it runs).
class Reporter {
public:
    // `unit`: what a sample counts ("samples", "calls", "words": -e alloc's weights).
    Reporter(Session& s, const CommonOptions& o, const char* unit, TopOptions top);
    void add(const bb_record& r, std::span<const uint32_t> frames);
    // From the run loop: writes and starts a new interval when --every has passed.
    void tick(uint64_t now_ns);
    // The last interval (or the only report).
    void finish(uint64_t now_ns);
    // A line above the top table (beam-bpf-blame's "N samples of FUNC").
    void set_heading(std::string h) { heading_ = std::move(h); }

private:
    void write(uint64_t now_ns);
    Session& s_;
    const CommonOptions& o_;
    const char* unit_;
    bool weigh_words_;  // unit "words": records weigh what they allocated
    TopOptions top_;
    std::string heading_;
    Aggregator agg_;
    uint64_t interval_start_ns_ = 0;  // monotonic
};

// Drains the session's sampler until `duration` (0: no limit), SIGINT/SIGTERM, the VM's exit, or
// `done` returning true. Each record (of --process only) is symbolized into root-first frame ids
// and handed to `on_stack`; `tick` gets the monotonic time once per drain while the run goes on.
RunStats run_loop(Session& s, const CommonOptions& o,
                  const std::function<void(const bb_record&, std::span<const uint32_t>)>& on_stack,
                  const std::function<bool()>& done = {},
                  const std::function<void(uint64_t)>& tick = {});

// "beam-bpf: N samples ..., N dropped, N truncated, N unsymbolized ..." on stderr.
void print_summary(const RunStats& s, const SamplerCounters& c, const Symbolizer& sym, const char* what);

// --stats FILE: the run's figures as JSON (nothing when o.stats_file is empty).
void write_stats(const CommonOptions& o, const RunStats& s, const SamplerCounters& c, const Symbolizer& sym);

// Runs `body`, turning UserError and other exceptions into one line and exit code 1.
int guarded_main(const char* prog, const std::function<int()>& body);

}  // namespace bb
