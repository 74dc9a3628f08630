#include "run/wall_loop.hpp"

#include <sys/resource.h>
#include <time.h>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "base/clock.hpp"
#include "base/text.hpp"
#include "run/output.hpp"
#include "run/events.hpp"
#include "run/reporter.hpp"
#include "run/run_loop.hpp"
#include "run/wall_profile.hpp"

namespace bb {

namespace {

double cpu_seconds_self() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

void write_wall_stats(const std::string& path, const WallCounts& n, double seconds, double cpu_s) {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    nlohmann::json j{{"event", "wall"},
                     {"seconds", seconds},
                     {"ticks", n.ticks},
                     {"live_mean", n.ticks ? static_cast<double>(n.live) / static_cast<double>(n.ticks) : 0.0},
                     {"processes_profiled", n.kept},
                     {"stacks_read", n.read},
                     {"running_collecting_exiting", n.busy},
                     {"not_read_budget", n.not_read},
                     {"truncated", n.truncated},
                     {"exited_while_read", n.exited},
                     {"changed_while_read", n.changed},
                     {"stack_unreadable", n.unreadable},
                     {"calls_named", n.calls_named},
                     {"calls_unknown", n.calls_unknown},
                     {"slot_bytes", n.slot_bytes},
                     {"process_reads", n.process_reads},
                     {"stack_words", n.words},
                     {"process_seconds", static_cast<double>(n.weight_ns) / 1e9},
                     {"tool_cpu_s", cpu_s},
                     {"peak_rss_kib", ru.ru_maxrss}};
    // As the other runs' --stats: whole or not at all, never through a planted symlink.
    write_file_atomically(path, json_text(j, 2) + "\n");
}

}  // namespace

int run_wall(Session& s, const CommonOptions& o, uint32_t per_tick) {
    const Vm& vm = s.vm;
    WallProfile wall(s, per_tick, o.max_depth, o.process);
    const char* tool = tool_name();
    s.start_ns = monotonic_ns();
    s.start_unix_ns = unix_now_ns();
    if (o.verbose)
        fmt::print(stderr, "{}\n",
                   printable(fmt::format("{}: attached to {} (pid {}, {}), offsets from {}, {} JIT modules, {}, {} "
                                         "processes read a tick (of {} process table slots)",
                                         tool, vm.exe(), vm.pid(), vm.build().describe(), vm.offsets().origin,
                                         s.sym.jit().module_count(), describe_event(o), per_tick, wall.table_slots())));
    else print_attached(vm, "", fmt::format("{}, {} processes a tick", describe_event(o), per_tick));
    if (!vm.caveat().empty()) fmt::print(stderr, "{}: warning: {}\n", tool, printable(vm.caveat()));
    if (!s.names.unavailable().empty())
        fmt::print(stderr, "{}: warning: processes are shown by pid only: {}\n", tool,
                   printable(s.names.unavailable()));

    // The top table alone ranks what is not idle: most of a node's processes are servers waiting
    // in a receive with nothing queued, whose rows would bury the one waiting for a busy pool.
    // Every other format keeps them, and so does the table of one --process.
    const bool top_only = top_table_only(o) && o.process.empty();
    Reporter rep(s, o, mode_of(o.event).kind, {.rows = o.top, .flat = o.flat, .hide_idle = top_only});
    uint64_t idle_ns = 0;
    auto on_stack = [&](const bb_record& r, std::span<const uint32_t> stack, uint64_t weight) {
        idle_ns += wall.idle(stack) ? weight : 0;
        rep.add(r, stack, weight);
    };

    catch_stop_signals();
    std::string error;
    const uint64_t interval = 1'000'000'000ull / o.frequency;
    const double cpu_start = cpu_seconds_self();
    uint64_t start = monotonic_ns(), last_vm_check = start, next = start;
    bool vm_exited = false;
    for (;;) {
        const uint64_t now = monotonic_ns();
        if (stop_requested() || (o.duration > 0 && now - start >= static_cast<uint64_t>(o.duration * 1e9))) break;
        if (now < next) {
            timespec ts{static_cast<time_t>(next / 1'000'000'000ull), static_cast<long>(next % 1'000'000'000ull)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);  // a signal ends it early
            continue;
        }
        next += interval;
        if (next < now) next = now + interval;  // behind (a slow tick): no burst to catch up
        try {
            if (now - last_vm_check > 1'000'000'000ull) {
                last_vm_check = now;
                if (!vm.alive()) {
                    vm_exited = true;
                    break;
                }
            }
            wall.tick(now, on_stack);
            rep.tick(now);
        } catch (const std::exception& e) {
            // After attach nothing may lose the profile collected so far.
            error = e.what();
            break;
        }
    }
    const double seconds = static_cast<double>(monotonic_ns() - start) / 1e9;
    const WallCounts& n = wall.counts();
    const double cpu_s = cpu_seconds_self() - cpu_start;
    if (o.every == 0)
        rep.set_heading(
            fmt::format("{:.1f} process-seconds of {:.0f} processes on average over {:.1f} s, estimated from {} "
                        "processes read at "
                        "{} ticks a second; {:.1f} of them idle (in a receive with an empty queue, or hibernated). {}",
                        static_cast<double>(n.weight_ns) / 1e9, n.ticks ? static_cast<double>(n.live) / n.ticks : 0.0,
                        seconds, n.kept, o.frequency, static_cast<double>(idle_ns) / 1e9,
                        top_only ? "Shares of the time not idle (the idle time is in the other formats):"
                                 : "Shares of all the process time:"));
    rep.finish(monotonic_ns());
    // One line within a terminal's width; what the reads cost and how each process was read,
    // a second line with -v.
    const uint64_t left_out = n.exited + n.changed + n.unreadable;
    // What makes a stack partial is said in the short line too, where there is any.
    fmt::print(stderr, "{}: {} ticks in {:.1f} s, {} processes profiled{}{}{}; this tool's CPU {:.1f}%\n", tool,
               n.ticks, seconds, n.kept, left_out ? fmt::format(", {} left out (-v says why)", left_out) : "",
               n.not_read ? fmt::format(", {} without their stacks", n.not_read) : "",
               n.truncated ? fmt::format(", {} truncated", n.truncated) : "", 100 * cpu_s / seconds);
    if (o.verbose)
        fmt::print(stderr,
                   "{}: {} stacks read, {} running, collecting or exiting named by their function{}{}{}; left out: {} "
                   "exited, {} changed while read (read twice), {} whose stack did not read. Read of the VM: {:.1f} "
                   "MB/s of process table, {:.0f} Process structs/s, {:.0f} stack words/s\n",
                   tool, n.read, n.busy,
                   n.not_read ? fmt::format(", {} without their stacks (the tick's word budget)", n.not_read) : "",
                   n.truncated ? fmt::format(", {} truncated at {} words", n.truncated, kStackWordsPerProcess) : "",
                   n.calls_named + n.calls_unknown
                       ? fmt::format(", {} of {} in a monitored call (gen:do_call/4, ...) with their callee named",
                                     n.calls_named, n.calls_named + n.calls_unknown)
                       : "",
                   n.exited, n.changed, n.unreadable, static_cast<double>(n.slot_bytes) / 1e6 / seconds,
                   static_cast<double>(n.process_reads) / seconds, static_cast<double>(n.words) / seconds);
    if (vm_exited) fmt::print(stderr, "{}: the VM exited\n", tool);
    if (!o.stats_file.empty()) write_wall_stats(o.stats_file, n, seconds, cpu_s);
    if (!error.empty()) {
        fmt::print(stderr, "{}: error: {}\n", tool, printable(error));
        return 1;
    }
    return 0;
}

}  // namespace bb
