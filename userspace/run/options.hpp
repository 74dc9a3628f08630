// The run's configuration, typed: what beam-bpf-sample and beam-bpf-blame are asked on the
// command line, checked and resolved once (resolve()) before anything attaches.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "report/report.hpp"
#include "sampling/sampler.hpp"

// CLI11 is header-only and costs seconds of -O2 in every file that includes it: only the mains
// and options.cpp, which build the command line, do.
namespace CLI {
class App;
}

namespace bb {

// What counts towards a sample.
enum class Event {
    cpu_clock,  // CPU time of each VM thread (works everywhere)
    cycles,     // hardware CPU cycles (a PMU)
    alloc,      // beam-bpf-sample -e alloc: words allocated on process heaps, sampled where allocated
    alloc_gc,   // -e alloc-gc: the same words, charged to the stack at each GC entry (biased)
    wall,       // beam-bpf-sample -e wall: where every Erlang process spends wall-clock time (no BPF)
    offcpu,     // beam-bpf-sample -e offcpu: where the VM's threads block, weighed by the ns blocked
};
const char* event_name(Event e);
inline bool is_alloc(Event e) { return e == Event::alloc || e == Event::alloc_gc; }
// -e alloc's default sampling interval: a sample every 65,536 words (512 KiB) allocated on
// average, Go's and TCMalloc's default for heap profiles.
constexpr uint64_t kAllocIntervalWords = 65536;

// -e offcpu's default threshold: blocks of 1 ms or more are all walked, shorter ones sampled.
constexpr uint64_t kOffcpuThresholdUs = 1000;

// -d's least: a shorter run is too short to say anything.
constexpr double kMinDuration = 0.1;

struct CommonOptions {
    std::vector<std::string> targets;  // the PID words as given (find/find_vm.hpp resolves them)
    std::string node;                  // --node NAME instead of a PID
    int pid = 0;                       // the beam.smp they name, set by the tool before Session
    uint64_t frequency = 999;          // -e wall: ticks per second (resolve() sets its default)
    bool frequency_given = false;
    uint64_t period = 0;   // --period: ns of CPU time (cpu-clock), cycles, or words (-e alloc); overrides -F
    bool per_cpu = false;  // one event per CPU instead of one per VM thread
    Event event = Event::cpu_clock;
    bool watchpoints_in_vm = false;  // -e alloc in a virtual machine (sampling/alloc_watch.hpp)
    uint64_t threshold_us = 0;       // -e offcpu: --threshold (0: kOffcpuThresholdUs)
    double duration = 0;             // 0: until Ctrl-C
    bool duration_given = false;
    size_t top = 20;
    std::string format = "top";  // report/report.hpp, comma-separated; --folded: --format folded
    bool folded = false;
    bool lines = false;
    bool raw_names = false;
    bool only_erlang = false;
    bool flat = false;  // the top table by each frame's own time, native code ranked with Erlang
    uint32_t max_depth = 512;
    uint32_t native_depth = 64;  // native frames unwound per sample below the leaf (0: the leaf only)
    bool kernel = false;         // the kernel's frames of samples in system calls
    std::string output;          // empty: stdout
    std::string offsets_file;
    std::string process;        // "<0.85.0>" or a registered name: only this Erlang process
    bool by_process = false;    // a root frame per process name (how many processes had it)
    bool by_pid = false;        // a root frame per process: name, then pid
    std::string stats_file;     // JSON figures of the run, for the bench
    double every = 0;           // --every: one report per this many seconds, -o names them by %t
    bool verbose = false;       // -v: the attach line in full (build-id, where offsets and symbols came from)
    bool wait_for_boot = true;  // the agent: false (Vm::attach)

    // Resolved by resolve(), from the above:
    std::vector<Format> formats;
    uint64_t ns_per_sample = 0;  // the CPU time a cpu-clock sample stands for; 0 for counts
};

// Whether the run writes the top table alone: -e offcpu and -e wall leave the idle time out of
// it then (every other format keeps it).
inline bool top_table_only(const CommonOptions& o) { return o.formats.size() == 1 && o.formats.front() == Format::top; }

// The positional PID (any number of words: find_vm refuses more than one in one line) and
// --node NAME, for every tool that attaches to one VM.
void add_target_options(CLI::App& app, std::vector<std::string>& targets, std::string& node);
void add_common_options(CLI::App& app, CommonOptions& o);
// Checks what CLI11 cannot (ranges, combinations, -o) and fills the resolved fields;
// throws UserError.
void resolve(CommonOptions& o);
SamplerConfig sampler_config(const CommonOptions& o);
// -e alloc's watchpoint interval in words (--period, else the default); 0 for other events.
uint64_t alloc_interval(const CommonOptions& o);
// How the run samples, for the attach line: in a few words, in full with -v (o.verbose).
std::string describe_event(const CommonOptions& o);
// Root, or the three capabilities; UserError naming the missing ones otherwise.
void check_privileges();

}  // namespace bb
