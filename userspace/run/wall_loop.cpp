#include "run/wall_loop.hpp"

#include <sys/resource.h>
#include <time.h>

#include <fmt/format.h>

#include <cerrno>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/clock.hpp"
#include "base/text.hpp"
#include "inspect/find_process.hpp"
#include "run/reporter.hpp"
#include "run/run_loop.hpp"
#include "sampling/wall_sampler.hpp"

namespace bb {

std::string receive_frame(int64_t queue_len) {
    if (queue_len <= 0) return "[receive, queue 0]";
    // Unsigned: the top bucket's end, 10^19 - 1, is past INT64_MAX (a garbage length).
    uint64_t low = 1;
    while (low <= static_cast<uint64_t>(queue_len) / 10) low *= 10;
    return fmt::format("[receive, queue {}-{}]", low, low * 10 - 1);
}

namespace {

// The record the BPF walker would have made of this process: its resume address as the leaf
// (in JIT code), its continuation pointers as the Erlang frames. A stack deeper than
// `max_frames` keeps its leaf-most frames and its BB_ROOT_FRAMES root-most ones in the ring
// the symbolizer reads (beam_bpf.h), as the walker's does.
void fill_record(bb_record& r, const ProcessStack& st, uint64_t now_ns, uint32_t max_frames) {
    const ProcessEntry& p = st.proc;
    r = {};
    r.time_ns = now_ns;
    r.where = BB_WHERE_JIT;
    r.ip = p.i;
    r.c_p = p.c_p;
    r.erl_pid = p.pid;
    r.flags = BB_F_PROC;
    r.sched_type = BB_SCHED_NONE;
    r.reg_name = p.reg_name;
    for (int i = 0; i < 3; i++) r.initial[i] = p.initial[i];
    const std::vector<uint64_t>& cps = st.scan.cps;
    const size_t n = cps.size();
    if (n <= max_frames || st.words_unread || max_frames < 2 * BB_ROOT_FRAMES) {
        // All of them, or the leaf-most (the root-most were not read: a frame says so).
        r.nframes = static_cast<uint16_t>(std::min<size_t>(n, max_frames));
        for (size_t i = 0; i < r.nframes; i++) r.frames[i] = cps[i];
        return;
    }
    const uint32_t ring0 = max_frames - BB_ROOT_FRAMES;
    for (uint32_t i = 0; i < ring0; i++) r.frames[i] = cps[i];
    for (size_t i = n - BB_ROOT_FRAMES; i < n; i++) r.frames[BB_ROOT_SLOT(i, ring0)] = cps[i];
    r.nframes = static_cast<uint16_t>(max_frames);
    r.nskipped = static_cast<uint32_t>(n - max_frames);
    r.flags |= BB_F_TRUNCATED;
}

// "[waiting for bb_server <0.90.0>]": the callee's name (registered, else as processes are
// named) and pid; "[waiting for ?]" when the VM's bookkeeping of the call was not found.
std::string callee_frame(Session& s, const WallProcess& w) {
    if (w.call != WallProcess::Call::named) return "[waiting for ?]";
    const ProcessEntry& c = w.callee;
    const std::string name = c.c_p ? s.names.name(c.pid, c.c_p, c.reg_name, c.initial) : "";
    return fmt::format("[waiting for {}{}{}]", name, name.empty() ? "" : " ", s.vm.format_pid(c.pid));
}

struct WallCounts {
    uint64_t ticks = 0, live = 0, kept = 0, read = 0, busy = 0, not_read = 0, truncated = 0;
    uint64_t exited = 0, changed = 0, unreadable = 0, calls_named = 0, calls_unknown = 0;
    uint64_t slot_bytes = 0, process_reads = 0, words = 0;
    uint64_t weight_ns = 0;  // process time the profile stands for
};

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
    std::ofstream f(path);
    f << json_text(j, 1) << "\n";
    if (!f) throw UserError(fmt::format("cannot write --stats {}", path));
}

}  // namespace

int run_wall(Session& s, const CommonOptions& o, uint32_t per_tick) {
    const Vm& vm = s.vm;
    Symbolizer& sym = s.sym;
    const ProcessTableRef table = process_table_ref(vm.mem(), vm.offsets(), vm.symbol_address("erts_proc"));
    const uint64_t normal_exit = sym.emulator() ? sym.emulator()->normal_exit : 0;
    uint64_t now = monotonic_ns();
    const CodeView code{.in_code =
                            [&](uint64_t addr) {
                                auto hit = sym.jit().lookup(addr, now);
                                return hit && hit->range;
                            },
                        .normal_exit = normal_exit};
    // gen:do_call/4 as the VM names it, whatever --raw-names says.
    auto in_gen_call = [&](uint64_t addr) {
        auto hit = sym.jit().lookup(addr, now);
        return hit && hit->range && hit->range->name == "gen:do_call/4";
    };
    WallSampler sampler(vm.mem(), vm.offsets(), table, code,
                        {.per_tick = per_tick,
                         .in_gen_call = in_gen_call,
                         .slot_of = [&vm](uint64_t pid) { return vm.process_slot(pid); }});
    if (s.only_pid) {
        // Its Process, found once in the table; each tick reads it alone.
        std::optional<uint64_t> c_p;
        for (const ProcessEntry& e : read_process_table(vm).processes)
            if (e.pid == *s.only_pid) c_p = e.c_p;
        if (!c_p) throw UserError(fmt::format("--process {}: no such process", o.process));
        sampler.only(*c_p, *s.only_pid);
    }

    const char* tool = tool_name();
    s.start_ns = monotonic_ns();
    s.start_unix_ns = unix_now_ns();
    fmt::print(stderr, "{}\n",
               printable(fmt::format("{}: attached to {} (pid {}, {}), offsets from {}, {} JIT modules, {}, {} "
                                     "processes read a tick (of {} process table slots)",
                                     tool, vm.exe(), vm.pid(), vm.build().describe(), vm.offsets().origin,
                                     sym.jit().module_count(), describe_event(o), per_tick, table.max)));
    if (!vm.caveat().empty()) fmt::print(stderr, "{}: warning: {}\n", tool, printable(vm.caveat()));
    if (!s.names.unavailable().empty())
        fmt::print(stderr, "{}: warning: processes are shown by pid only: {}\n", tool, printable(s.names.unavailable()));

    Reporter rep(s, o, "wall", {.rows = o.top, .flat = o.flat});
    // The VM's process states, as process_info(P, status) names them: each a root frame.
    std::unordered_map<std::string, uint32_t> roots;
    auto state_root = [&](const ProcessEntry& p) {
        const char* status = p.status();
        auto [it, added] = roots.try_emplace(status, 0);
        if (added) it->second = sym.pseudo_frame(fmt::format("[{}]", status));
        return it->second;
    };
    const uint32_t truncated = sym.pseudo_frame(fmt::format("[truncated: stack deeper than {} words]", kStackWordsPerProcess));
    const uint32_t not_read = sym.pseudo_frame("[stack not read: the tick's word budget was spent]");
    auto record = std::make_unique<bb_record>();
    std::vector<uint32_t> frames, stack;

    catch_stop_signals();
    WallCounts n;
    std::string error;
    const uint64_t interval = 1'000'000'000ull / o.frequency;
    const double cpu_start = cpu_seconds_self();
    uint64_t start = monotonic_ns(), last_tick = start, last_vm_check = start, next = start;
    bool vm_exited = false;
    for (;;) {
        now = monotonic_ns();
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
            sym.refresh(now);
            WallTick t = sampler.tick();
            // The process time since the last tick, shared by the processes kept: each stands
            // for live / kept processes over that time (the first tick: over one interval).
            const uint64_t dt = n.ticks ? now - last_tick : interval;
            last_tick = now;
            n.ticks++;
            n.live += t.live;
            n.exited += t.exited;
            n.changed += t.changed;
            n.unreadable += t.unreadable;
            n.calls_named += t.calls_named;
            n.calls_unknown += t.calls_unknown;
            n.slot_bytes += t.slot_bytes;
            n.process_reads += t.process_reads;
            n.words += t.words;
            if (t.kept() == 0) continue;
            const uint64_t weight = static_cast<uint64_t>(static_cast<double>(t.live) * static_cast<double>(dt) /
                                                          static_cast<double>(t.kept()));
            for (const WallProcess& w : t.processes) {
                const ProcessEntry& p = w.stack.proc;
                const bool read = w.stack.outcome == ProcessStack::Outcome::read;
                n.kept++;
                n.read += read;
                n.busy += !read && !w.not_read;
                n.not_read += w.not_read;
                n.truncated += read && w.stack.words_unread;
                fill_record(*record, w.stack, now, o.max_depth);
                sym.frames(*record, frames);
                stack.clear();
                stack.push_back(state_root(p));
                if (w.not_read) stack.push_back(not_read);
                if (read && w.stack.words_unread) stack.push_back(truncated);
                stack.insert(stack.end(), frames.begin(), frames.end());
                if (w.call != WallProcess::Call::none) stack.push_back(sym.pseudo_frame(callee_frame(s, w)));
                else if (read && std::string_view(p.status()) == "waiting")
                    stack.push_back(sym.pseudo_frame(receive_frame(p.msgq_len)));
                rep.add(*record, stack, weight);
                n.weight_ns += weight;
            }
            rep.tick(now);
        } catch (const std::exception& e) {
            // After attach nothing may lose the profile collected so far.
            error = e.what();
            break;
        }
    }
    const double seconds = static_cast<double>(monotonic_ns() - start) / 1e9;
    const double cpu_s = cpu_seconds_self() - cpu_start;
    if (o.every == 0)
        rep.set_heading(fmt::format(
            "{:.1f} process-seconds of {:.0f} processes on average over {:.1f} s, estimated from {} processes read at "
            "{} ticks a second; shares of process time, by state (the root frames) and stack:",
            static_cast<double>(n.weight_ns) / 1e9, n.ticks ? static_cast<double>(n.live) / n.ticks : 0.0, seconds,
            n.kept, o.frequency));
    rep.finish(monotonic_ns());
    fmt::print(stderr,
               "{}: {} ticks in {:.1f} s: {} processes profiled ({} stacks read, {} running, collecting or exiting "
               "named by their function{}{}{}); left out: {} exited, {} changed while read (read twice), {} whose "
               "stack did not read. Read of the VM: {:.1f} MB/s of process table, {:.0f} Process structs/s, {:.0f} "
               "stack words/s; this tool's CPU {:.1f}%\n",
               tool, n.ticks, seconds, n.kept, n.read, n.busy,
               n.not_read ? fmt::format(", {} without their stacks (the tick's word budget)", n.not_read) : "",
               n.truncated ? fmt::format(", {} truncated at {} words", n.truncated, kStackWordsPerProcess) : "",
               n.calls_named + n.calls_unknown
                   ? fmt::format(", {} of {} in gen:do_call/4 with their callee named", n.calls_named,
                                 n.calls_named + n.calls_unknown)
                   : "",
               n.exited, n.changed, n.unreadable, static_cast<double>(n.slot_bytes) / 1e6 / seconds,
               static_cast<double>(n.process_reads) / seconds, static_cast<double>(n.words) / seconds,
               100 * cpu_s / seconds);
    if (vm_exited) fmt::print(stderr, "{}: the VM exited\n", tool);
    if (!o.stats_file.empty()) write_wall_stats(o.stats_file, n, seconds, cpu_s);
    if (!error.empty()) {
        fmt::print(stderr, "{}: error: {}\n", tool, printable(error));
        return 1;
    }
    return 0;
}

}  // namespace bb
