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
    bool folded = false;
    bool lines = false;
    bool only_erlang = false;
    uint32_t max_depth = 512;
    std::string output;       // empty: stdout
    std::string offsets_file;
    std::string process;      // "<0.85.0>": only this Erlang process
    std::string stats_file;   // JSON figures of the run, for scripts/bench.sh
};

void add_common_options(CLI::App& app, CommonOptions& o);
// Checks -F/--period/--max-depth/--process beyond what CLI11 can; throws UserError.
void validate(const CommonOptions& o);
SamplerConfig sampler_config(const CommonOptions& o);
// "cpu-clock 999 Hz per VM thread", for the attach line.
std::string describe_event(const CommonOptions& o);
// Root, or the three capabilities; UserError naming the missing ones otherwise.
void check_privileges();
// -o FILE or stdout; opened before attaching so a bad path fails fast.
class Output {
public:
    explicit Output(const std::string& path);
    std::ostream& stream() { return file_ ? *file_ : *std_; }

private:
    std::unique_ptr<std::ofstream> file_;
    std::ostream* std_;
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
    std::optional<Sampler> sampler;
};

struct RunStats {
    uint64_t records = 0;     // handled (after --process)
    double first_record_s = -1;  // from the tool's launch to the first record handled
    uint64_t truncated = 0, unreadable = 0;
    uint64_t not_running = 0; // a scheduler's stale current_process: the sample stays the scheduler's
    uint64_t fp_walked = 0;   // stacks read through the frame-pointer chain
    double seconds = 0;
    bool vm_exited = false;
    bool interrupted = false;
    std::string error;        // what stopped the run early after attach ("" if nothing did)
};

// Drains `sampler` until `duration` (0: no limit), SIGINT/SIGTERM, the VM's exit, or `done`
// returning true. Each record is symbolized into root-first frame ids and handed to `on_stack`.
RunStats run_loop(const Vm& vm, Sampler& sampler, Symbolizer& sym, const CommonOptions& o,
                  const std::function<void(const bb_record&, std::span<const uint32_t>)>& on_stack,
                  const std::function<bool()>& done = {});

// "beam-bpf: N samples ..., N dropped, N truncated, N unsymbolized ..." on stderr.
void print_summary(const RunStats& s, const SamplerCounters& c, const Symbolizer& sym, const char* what);

// --stats FILE: the run's figures as JSON (nothing when o.stats_file is empty).
void write_stats(const CommonOptions& o, const RunStats& s, const SamplerCounters& c, const Symbolizer& sym);

// Runs `body`, turning UserError and other exceptions into one line and exit code 1.
int guarded_main(const char* prog, const std::function<int()>& body);

}  // namespace bb
