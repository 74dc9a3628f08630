// beam-bpf-userspace-bench: how many records beam-bpf's user space symbolizes and aggregates
// per second on one core, with the VM's real records.
//
//   1. Attaches to a running VM and times the JIT symbol index: a full read of the VM's module
//      list from nothing (what start-up pays) and re-reads with nothing changed (what the run
//      loop pays once a second).
//   2. Samples the VM with the real BPF walker (bb::Sampler) for --seconds and keeps every
//      record in memory.
//   3. Stops the VM (SIGSTOP, so the replay has the core to itself and nothing changes under
//      it), then replays the records --passes times through a fresh bb::Symbolizer::frames and
//      one bb::Aggregator::add, on this one thread, calling Symbolizer::refresh as the run loop
//      does (its once-a-second re-read of the module list is part of the cost). The first pass
//      starts with empty caches; later passes are the steady state. Time is this thread's CPU
//      time (CLOCK_THREAD_CPUTIME_ID). The VM is resumed (SIGCONT) afterwards.
//
// Prints one JSON object (also to --json FILE).
#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "profile/aggregate.hpp"
#include "base/error.hpp"
#include "run/options.hpp"
#include "symbols/jit_code.hpp"
#include "sampling/sampler.hpp"
#include "symbols/symbolizer.hpp"
#include "target/vm.hpp"

using namespace bb;

namespace {

uint64_t clock_ns(clockid_t id) {
    timespec ts;
    clock_gettime(id, &ts);
    return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}
uint64_t mono_ns() { return clock_ns(CLOCK_MONOTONIC); }
uint64_t thread_cpu_ns() { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

double median(std::vector<double> v) {
    if (v.empty()) return 0;
    std::sort(v.begin(), v.end());
    size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// Resumes the VM however we leave.
struct VmStopper {
    pid_t pid = 0;
    bool stopped = false;
    void stop() {
        if (kill(pid, SIGSTOP) == 0) stopped = true;
    }
    void resume() {
        if (stopped) kill(pid, SIGCONT);
        stopped = false;
    }
    ~VmStopper() { resume(); }
};

int run(int argc, char** argv) {
    CLI::App app{"beam-bpf-userspace-bench: records symbolized and aggregated per second on one core"};
    int pid = 0;
    double seconds = 5;
    uint64_t frequency = 9999;
    unsigned passes = 20;
    unsigned refresh_repeats = 10;
    int cpu = -1;
    std::string json_file;
    app.add_option("PID", pid, "OS pid of the running beam.smp")->required();
    app.add_option("--seconds", seconds, "seconds of sampling to collect records")->capture_default_str();
    app.add_option("-F,--frequency", frequency, "sampling frequency per CPU")->capture_default_str();
    app.add_option("--passes", passes, "replays of the collected records (the first one cold)")->capture_default_str();
    app.add_option("--refresh-repeats", refresh_repeats, "timed re-reads of an unchanged module list")
        ->capture_default_str();
    app.add_option("--cpu", cpu, "pin this thread to CPU N for the replay");
    app.add_option("--json", json_file, "also write the result here");
    CLI11_PARSE(app, argc, argv);
    if (passes < 2) throw UserError("--passes: at least 2 (the first is cold)");

    check_privileges();
    Vm vm = Vm::attach(pid);
    uint64_t descriptor = vm.symbol_address("__jit_debug_descriptor");

    // 1. The JIT symbol index: a cold read, then re-reads with nothing new.
    nlohmann::json index;
    {
        VmStopper stopper{pid};
        stopper.stop();  // a still module list: every timing reads the same thing
        JitCodeIndex idx(vm.mem(), descriptor, !vm.release().jit_unregisters);
        uint64_t t0 = mono_ns();
        auto r = idx.refresh(mono_ns());
        double cold_ms = (mono_ns() - t0) / 1e6;
        if (!r.ok) throw UserError("JIT index refresh failed: " + r.error);
        std::vector<double> warm;
        for (unsigned i = 0; i < refresh_repeats; i++) {
            uint64_t s = mono_ns();
            auto rr = idx.refresh(mono_ns());
            warm.push_back((mono_ns() - s) / 1e6);
            if (!rr.ok) throw UserError("JIT index re-read failed: " + rr.error);
        }
        index = {{"modules", idx.module_count()},
                 {"ranges", idx.range_count()},
                 {"cold_refresh_ms", cold_ms},
                 {"warm_refresh_ms_median", median(warm)},
                 {"warm_refresh_ms_max", *std::max_element(warm.begin(), warm.end())}};
    }

    // 2. Real records from the BPF walker.
    std::vector<uint64_t> arena;  // records back to back, each trimmed after its last frame
    std::vector<size_t> offsets;  // in words
    SamplerConfig cfg;
    cfg.frequency_hz = frequency;
    SamplerCounters counters;
    {
        Sampler sampler(vm, cfg);
        uint64_t start = mono_ns(), last_state = start;
        auto keep = [&](const bb_record& r) {
            size_t bytes = bb_record_size(r.nframes);
            size_t words = (bytes + 7) / 8;
            offsets.push_back(arena.size());
            arena.resize(arena.size() + words);
            std::memcpy(arena.data() + offsets.back(), &r, bytes);
        };
        while (mono_ns() - start < uint64_t(seconds * 1e9)) {
            if (mono_ns() - last_state > 1000000000ull) {
                last_state = mono_ns();
                sampler.refresh_vm_state();
            }
            sampler.poll(std::chrono::milliseconds(100), keep);
        }
        sampler.poll(std::chrono::milliseconds(0), keep);
        counters = sampler.counters();
    }
    if (offsets.empty()) throw UserError("no records collected: is the VM busy?");
    uint64_t frames_total = 0;
    for (size_t off : offsets) frames_total += reinterpret_cast<const bb_record*>(arena.data() + off)->nframes;

    // 3. Replay on one core with the VM stopped.
    if (cpu >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0)
            throw UserError(fmt::format("cannot pin to CPU {}: {}", cpu, std::strerror(errno)));
    }
    VmStopper stopper{pid};
    stopper.stop();
    uint64_t c0 = thread_cpu_ns();
    Symbolizer sym(vm, {});  // reads the module list: the start-up cost
    double symbolizer_init_ms = (thread_cpu_ns() - c0) / 1e6;
    Aggregator agg;
    std::vector<uint32_t> frames;
    std::vector<double> pass_rate;  // records per CPU second, per pass
    uint64_t steady_ns = 0, steady_records = 0, out_frames = 0;
    for (unsigned p = 0; p < passes; p++) {
        uint64_t t0 = thread_cpu_ns();
        size_t i = 0;
        for (size_t off : offsets) {
            // The run loop calls refresh() once per drain (every 100 ms, ~2,000 records at
            // 9,999 Hz on 2 CPUs); calling it more often only costs a clock read.
            if (i++ % 1024 == 0) sym.refresh(mono_ns());
            const auto& r = *reinterpret_cast<const bb_record*>(arena.data() + off);
            sym.frames(r, frames);
            agg.add(frames);
            if (p == 0) out_frames += frames.size();
        }
        uint64_t ns = thread_cpu_ns() - t0;
        pass_rate.push_back(offsets.size() / (ns / 1e9));
        if (p > 0) {
            steady_ns += ns;
            steady_records += offsets.size();
        }
    }
    stopper.resume();

    nlohmann::json j = {
        {"vm_pid", pid},
        {"jit_index", index},
        {"collect",
         {{"seconds", seconds},
          {"frequency_hz", frequency},
          {"records", offsets.size()},
          {"dropped", counters.dropped},
          {"bpf_frames_per_record_mean", double(frames_total) / offsets.size()},
          {"bytes_in_memory", arena.size() * 8}}},
        {"replay",
         {{"passes", passes},
          {"symbolizer_init_ms", symbolizer_init_ms},
          {"frames_per_stack_mean", double(out_frames) / offsets.size()},
          {"unique_stacks", agg.unique_stacks()},
          {"locations", sym.frames().size()},
          {"unsymbolized_frames", sym.unsymbolized()},
          {"first_pass_records_per_s", pass_rate.front()},
          {"steady_records_per_s", steady_records / (steady_ns / 1e9)},
          {"steady_pass_records_per_s_median", median(std::vector<double>(pass_rate.begin() + 1, pass_rate.end()))},
          {"steady_ns_per_record", double(steady_ns) / steady_records}}},
    };
    std::cout << j.dump(2) << "\n";
    if (!json_file.empty()) {
        std::ofstream f(json_file);
        f << j.dump(2) << "\n";
        if (!f) throw UserError("cannot write " + json_file);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return guarded_main("beam-bpf-userspace-bench", [&] { return run(argc, argv); });
}
