// beam-bpf-sample: where a running BEAM spends CPU, in Erlang terms, from stacks read in
// the kernel at the instant of each sample.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ostream.h>

#include "base/clock.hpp"
#include "base/text.hpp"
#include "base/usage.hpp"
#include "find/find_vm.hpp"
#include "run/events.hpp"
#include "run/pstack.hpp"
#include "run/reporter.hpp"
#include "run/run_loop.hpp"
#include "run/offcpu.hpp"
#include "run/session.hpp"
#include "run/wall_loop.hpp"
#include "sampling/wall_sampler.hpp"

using namespace bb;

namespace {

int run(int argc, char** argv) {
    CLI::App app{
        "beam-bpf-sample: the hottest Erlang functions of a running BEAM VM (OS pid of beam.smp).\n"
        "Stacks are read by a BPF program at the instant of each sample: no VM restart, no VM flags,\n"
        "works on stripped distribution builds. Needs root, or CAP_BPF + CAP_PERFMON + CAP_SYS_PTRACE.\n"
        "Default report: SELF% (samples with the function as leaf) and TOTAL% (anywhere on the stack).\n"
        "-e alloc: an allocation profile instead: the stacks that allocate words on process heaps, sampled\n"
        "where they allocate by hardware write watchpoints (SELF% and TOTAL% of words; see\n"
        "docs/allocation-profiling.md).\n"
        "-e wall: a wall-clock profile of every Erlang process instead, running or not: where processes wait\n"
        "(root frames [waiting], [runnable], [running], ...), in process-seconds; read from user space, no BPF\n"
        "(see docs/wall-profiling.md)."};
    CommonOptions o;
    bool pstack = false;
    uint32_t per_tick = kWallProcessesPerTick;
    add_common_options(app, o);
    CLI::Option* per_tick_option =
        app.add_option("--per-tick", per_tick,
                       "-e wall: processes read each tick, a uniform random subset of the live ones (each read "
                       "stands for live/N of them); more gives finer shares at more reads of the VM")
            ->capture_default_str()
            ->check(CLI::Range(1u, 100000u));
    app.add_flag("--pstack", pstack,
                 "print one stack of each scheduler that is running a process (its Erlang pid, its "
                 "name if it has one, and every frame, leaf first), then quit: as soon as every busy "
                 "scheduler has been seen, at most -d seconds (default 2: an idle scheduler is never "
                 "sampled)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return usage_error(app, e);
    }
    // The options first (a bad one is the only line), then which VM.
    resolve(o);
    const bool alloc = is_alloc(o.event);
    if (per_tick_option->count() && o.event != Event::wall) throw UserError("--per-tick: only with -e wall");
    if (!mode_of(o.event).perf_sampled && pstack)
        throw UserError(fmt::format("--pstack shows where schedulers are now: not with -e {}", event_name(o.event)));
    o.pid = find_vm(o.targets, o.node);
    if (o.event == Event::wall) {
        Session s(o);
        return run_wall(s, o, per_tick);
    }
    if (o.event == Event::offcpu) {
        Session s(o);
        return run_offcpu(s, o);
    }
    // The native leaf of a GC entry record is the probed entry point itself: not allocation.
    if (alloc) o.only_erlang = true;
    Session s(o);
    auto scheds = s.vm.sched_threads();
    SamplerConfig cfg = sampler_config(o);
    if (alloc) {
        // A build without one of the other entry points (a release that renamed it) loses the
        // collections that go through it: said, not silent.
        if (std::string missing = add_alloc_probes(s, cfg); !missing.empty())
            fmt::print(stderr, "{}: warning: {} has no {}: the words allocated through them are not counted\n",
                       tool_name(), s.vm.exe(), missing);
    }
    s.start(cfg, alloc       ? fmt::format("{} GC entry probes, {}", cfg.entry_probes.size(), describe_event(o))
                 : o.verbose ? fmt::format("{} scheduler threads, {}", scheds.size(), describe_event(o))
                             : describe_event(o));
    if (pstack) return run_pstack(s, o, scheds);

    Reporter rep(s, o, mode_of(o.event).kind, {.rows = o.top, .flat = o.flat});
    rep.count_sched_states(split_schedulers(s.vm, o));  // 0 for -e alloc: not cpu time
    auto st = run_loop(
        s, o, [&](const bb_record& r, std::span<const uint32_t> frames) { rep.add(r, frames); }, {},
        [&](uint64_t now) { rep.tick(now); });
    if (o.event == Event::alloc_gc && o.every == 0)
        rep.set_heading(
            fmt::format("{} words ({}) allocated on process heaps by the code on these stacks; {} more "
                        "arrived in received messages and other heap fragments (counted apart); shares "
                        "of words:",
                        st.alloc_words, human_bytes(8 * st.alloc_words), st.message_words));
    else if (alloc && o.every == 0)
        rep.set_heading(fmt::format(
            "{} words ({}) allocated on process heaps (exact, from the VM's GC entries and process exits); {} "
            "more arrived in received messages and other heap fragments (counted apart). "
            "Shares of words from {} samples where the words were allocated (hardware "
            "watchpoints, one per ~{} words) and the heap fragments BIFs asked for:",
            st.alloc_words, human_bytes(8 * st.alloc_words), st.message_words, st.alloc_samples, cfg.alloc_interval));
    const uint64_t end_ns = monotonic_ns();
    rep.finish(end_ns);
    st.sched_states = rep.run_states(end_ns);
    return end_run(s, o, st, alloc ? "allocation records" : "samples");
}

}  // namespace

int main(int argc, char** argv) {
    return guarded_main("beam-bpf-sample", [&] { return run(argc, argv); });
}
