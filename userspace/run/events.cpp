#include "run/events.hpp"

#include <fmt/format.h>

#include <array>
#include <vector>

#include "base/closest.hpp"
#include "sampling/wall_sampler.hpp"

namespace bb {

namespace {

void configure_nothing(const CommonOptions&, SamplerConfig&) {}

// A perf event's rate: -F, or --period in its unit.
std::string perf_rate(const CommonOptions& o, const char* name, const char* unit) {
    std::string rate = o.period ? fmt::format("every {} {}", o.period, unit) : fmt::format("{} Hz", o.frequency);
    return fmt::format("{} {} {}", name, rate, o.per_cpu ? "per CPU" : "per VM thread");
}

void check_perf_period(const CommonOptions& o, const char* unit) {
    if (o.period && o.period < 10000) throw UserError(fmt::format("--period {}: at least 10000 {}", o.period, unit));
}

const std::array<EventMode, 6> kModes{{
    {.event = Event::cpu_clock,
     .name = "cpu-clock",
     .help = "default: CPU time, works everywhere",
     .kind = "samples",
     .perf_sampled = true,
     .cpu_time = true,
     .own_option = nullptr,
     .resolve = [](CommonOptions& o) { check_perf_period(o, "ns"); },
     .describe = [](const CommonOptions& o, bool) { return perf_rate(o, "cpu-clock", "ns of CPU"); },
     .configure = configure_nothing},
    {.event = Event::cycles,
     .name = "cycles",
     .help = "CPU cycles from the hardware PMU, with the most precise IP the PMU gives; not in most VMs",
     .kind = "samples",
     .perf_sampled = true,
     .cpu_time = false,
     .own_option = nullptr,
     .resolve = [](CommonOptions& o) { check_perf_period(o, "cycles"); },
     .describe = [](const CommonOptions& o, bool) { return perf_rate(o, "cycles", "cycles"); },
     .configure = [](const CommonOptions&, SamplerConfig& c) { c.cycles = true; }},
    {.event = Event::alloc,
     .name = "alloc",
     .help = "beam-bpf-sample: an allocation profile, the stacks that allocate words on process heaps, sampled "
             "where they allocate by hardware watchpoints; see docs/allocation-profiling.md",
     .kind = "words",
     .perf_sampled = false,
     .cpu_time = false,
     .own_option = "--watchpoints-in-vm",
     .own_option_given = [](const CommonOptions& o) { return o.watchpoints_in_vm; },
     .resolve =
         [](CommonOptions& o) {
             if (o.period && (o.period < 64 || o.period > 0xffffffffull))
                 throw UserError(fmt::format("--period {}: -e alloc samples every 64 to 4294967295 words", o.period));
         },
     .describe =
         [](const CommonOptions& o, bool verbose) {
             if (!verbose) return fmt::format("alloc: a sample every ~{} words allocated", alloc_interval(o));
             return fmt::format(
                 "alloc: words allocated, a sample every ~{} words where they are allocated (hardware "
                 "watchpoints), totals at every GC entry and exit",
                 alloc_interval(o));
         },
     .configure =
         [](const CommonOptions& o, SamplerConfig& c) {
             c.alloc = true;
             c.alloc_interval = alloc_interval(o);
             c.watchpoints_in_vm = o.watchpoints_in_vm;
         }},
    {.event = Event::alloc_gc,
     .name = "alloc-gc",
     .help = "beam-bpf-sample: the words allocated, charged to the stack at each garbage collection instead of "
             "where they are allocated; biased on periodic code",
     .kind = "words",
     .perf_sampled = false,
     .cpu_time = false,
     .own_option = nullptr,
     .resolve =
         [](CommonOptions& o) {
             if (o.period) throw UserError("--period: -e alloc-gc takes every collection, it has no period");
         },
     .describe =
         [](const CommonOptions&, bool verbose) {
             return std::string(verbose ? "alloc-gc: words allocated, at every GC entry"
                                        : "alloc-gc: words allocated, at each GC");
         },
     .configure = [](const CommonOptions&, SamplerConfig& c) { c.alloc = true; }},
    {.event = Event::wall,
     .name = "wall",
     .help = "beam-bpf-sample: where every Erlang process spends wall-clock time, running or not: waiting, "
             "runnable, ...; a random subset of the processes read each tick, weighed in process-seconds; see "
             "docs/wall-profiling.md",
     .kind = "wall",
     .perf_sampled = false,
     .cpu_time = false,
     .own_option = nullptr,  // --per-tick is beam-bpf-sample's own (tools/sample_main.cpp)
     .resolve =
         [](CommonOptions& o) {
             if (!o.frequency_given) o.frequency = kWallHz;
             if (o.frequency == 0 || o.frequency > 1000)
                 throw UserError(fmt::format("-F {}: -e wall ticks 1 to 1000 times a second", o.frequency));
             if (o.period) throw UserError("--period: -e wall ticks -F times a second, it has no period");
             if (o.per_cpu || o.kernel)
                 throw UserError(fmt::format("{}: -e wall reads processes from user space, on no CPU's events",
                                             o.per_cpu ? "--per-cpu" : "--kernel"));
         },
     .describe =
         [](const CommonOptions& o, bool verbose) {
             return verbose ? fmt::format("wall: every process's state and stack, {} ticks a second", o.frequency)
                            : fmt::format("wall: {} ticks a second", o.frequency);
         },
     .configure = configure_nothing},  // read from user space (sampling/wall_sampler.hpp)
    {.event = Event::offcpu,
     .name = "offcpu",
     .help = "beam-bpf-sample: where the VM's threads block, in system calls, on locks (ETS tables and run "
             "queues named) or idle, with the Erlang stack of the process a scheduler ran, weighed by the time "
             "blocked; see docs/offcpu-profiling.md",
     .kind = "offcpu",
     .perf_sampled = false,
     .cpu_time = false,
     .own_option = "--threshold",
     .own_option_given = [](const CommonOptions& o) { return o.threshold_us != 0; },
     .resolve =
         [](CommonOptions& o) {
             if (!o.threshold_us) o.threshold_us = kOffcpuThresholdUs;
             if (o.period || o.frequency_given || o.per_cpu || o.kernel)
                 throw UserError(fmt::format("{}: -e offcpu records each block as it ends, on no sampling event",
                                             o.period            ? "--period"
                                             : o.frequency_given ? "-F"
                                             : o.per_cpu         ? "--per-cpu"
                                                                 : "--kernel"));
         },
     .describe =
         [](const CommonOptions& o, bool verbose) {
             if (!verbose) return fmt::format("offcpu: blocks of {} us or more", o.threshold_us);
             return fmt::format(
                 "offcpu: the VM's threads' blocked system calls, every one of {} us or more, shorter ones "
                 "sampled",
                 o.threshold_us);
         },
     .configure =
         [](const CommonOptions& o, SamplerConfig& c) {
             c.offcpu = true;
             c.offcpu_threshold_ns = 1000 * (o.threshold_us ? o.threshold_us : kOffcpuThresholdUs);
         }},
}};

}  // namespace

std::span<const EventMode> event_modes() { return kModes; }

const EventMode& mode_of(Event e) {
    for (const auto& m : kModes)
        if (m.event == e) return m;
    return kModes.front();  // unreachable: every Event has its entry
}

const EventMode* mode_named(std::string_view name) {
    for (const auto& m : kModes)
        if (name == m.name) return &m;
    return nullptr;
}

std::string event_names(bool perf_sampled_only, const char* last) {
    std::vector<std::string> names;
    for (const auto& m : kModes)
        if (m.perf_sampled || !perf_sampled_only) names.push_back(m.name);
    return join(names, ", ", fmt::format(" {} ", last));
}

std::string events_help() {
    std::vector<std::string> items;
    for (const auto& m : kModes) items.push_back(fmt::format("{} ({})", m.name, m.help));
    return join(items, ", ", " or ");
}

}  // namespace bb
