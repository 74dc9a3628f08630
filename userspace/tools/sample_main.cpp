// beam-bpf-sample: where a running BEAM spends CPU, in Erlang terms, from stacks read in
// the kernel at the instant of each sample.
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "base/clock.hpp"
#include "base/text.hpp"
#include "find/find_vm.hpp"
#include "run/reporter.hpp"
#include "run/run_loop.hpp"
#include "run/session.hpp"

using namespace bb;

namespace {

struct SchedKey {
    uint8_t type;
    uint16_t no;
    auto operator<=>(const SchedKey&) const = default;
};


int run(int argc, char** argv) {
    CLI::App app{
        "beam-bpf-sample: the hottest Erlang functions of a running BEAM VM (OS pid of beam.smp).\n"
        "Stacks are read by a BPF program at the instant of each sample: no VM restart, no VM flags,\n"
        "works on stripped distribution builds. Needs root, or CAP_BPF + CAP_PERFMON + CAP_SYS_PTRACE.\n"
        "Default report: SELF% (samples with the function as leaf) and TOTAL% (anywhere on the stack).\n"
        "-e alloc: an allocation profile instead: the stacks that allocate words on process heaps, sampled\n"
        "where they allocate by hardware write watchpoints (SELF% and TOTAL% of words; see README)."};
    CommonOptions o;
    bool pstack = false;
    add_common_options(app, o);
    app.add_flag("--pstack", pstack,
                 "print one stack of each scheduler that is running a process (its Erlang pid, its "
                 "name if it has one, and every frame, leaf first), then quit: as soon as every busy "
                 "scheduler has been seen, at most -d seconds (default 2: an idle scheduler is never "
                 "sampled)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }
    // The options first (a bad one is the only line), then which VM.
    resolve(o);
    o.pid = find_vm(o.targets, o.node);
    const bool alloc = is_alloc(o.event);
    if (alloc && pstack) throw UserError("--pstack shows where schedulers are now: not with -e alloc");
    // The native leaf of a GC entry record is the probed entry point itself: not allocation.
    if (alloc) o.only_erlang = true;
    Session s(o);
    auto scheds = s.vm.sched_threads();
    SamplerConfig cfg = sampler_config(o);
    if (alloc) {
        // A build without one of the other entry points (a release that renamed it) loses the
        // collections that go through it: said, not silent.
        if (std::string missing = add_alloc_probes(s.vm, cfg); !missing.empty())
            fmt::print(stderr, "{}: warning: {} has no {}: collections entered there are not counted\n",
                       tool_name(), s.vm.exe(), missing);
    }
    s.start(cfg, alloc ? fmt::format("{} GC entry probes, {}", cfg.entry_probes.size(), describe_event(o))
                       : fmt::format("{} scheduler threads, {}", scheds.size(), describe_event(o)));
    auto& out = s.out;
    auto& sym = s.sym;

    if (pstack) {
        // One stack of each running scheduler. A sample in JIT code is preferred: in C code
        // the leaf Erlang function is missing when it runs in a loop without a stack frame.
        size_t normal = 0;
        for (const auto& t : scheds) normal += t.sched.type == BB_SCHED_NORMAL;
        std::map<SchedKey, std::pair<bb_record, std::vector<uint32_t>>> seen;
        std::set<SchedKey> moved;  // their sampled process was seen later on another scheduler
        auto normal_in_jit = [&] {  // normal schedulers with a sample in JIT code
            size_t n = 0;
            for (const auto& [k, v] : seen) n += k.type == BB_SCHED_NORMAL && v.first.where == BB_WHERE_JIT;
            return n;
        };
        CommonOptions po = o;
        po.duration = o.duration > 0 ? o.duration : 2.0;  // idle schedulers are never sampled
        auto st = run_loop(
            s, po,
            [&](const bb_record& r, std::span<const uint32_t> frames) {
                if (!(r.flags & BB_F_PROC) || r.sched_type == BB_SCHED_NONE) return;
                SchedKey k{r.sched_type, r.sched_no};
                auto it = seen.find(k);
                bool jit = r.where == BB_WHERE_JIT;
                if (it != seen.end() && (it->second.first.where == BB_WHERE_JIT || !jit)) return;
                // The samples are taken at different instants: a process that moved (to a dirty
                // scheduler for a GC, say, and back) is shown only where it was seen last.
                for (auto other = seen.begin(); other != seen.end();) {
                    if (other->first == k || other->second.first.erl_pid != r.erl_pid) {
                        ++other;
                        continue;
                    }
                    if (other->second.first.time_ns > r.time_ns) return;
                    moved.insert(other->first);
                    other = seen.erase(other);
                }
                // The ring record ends after its frames: copy the header only (its frames are in
                // `frames`).
                bb_record head;
                std::memcpy(&head, &r, bb_record_size(0));
                head.nframes = 0;
                seen.insert_or_assign(k, std::make_pair(head, std::vector<uint32_t>(frames.begin(), frames.end())));
                moved.erase(k);
            },
            [&] { return normal && normal_in_jit() == normal; });
        auto& os = out.stream(Format::top);
        for (const auto& t : scheds) {
            SchedKey k{t.sched.type, t.sched.no};
            auto it = seen.find(k);
            if (it == seen.end()) {
                if (moved.count(k))
                    fmt::print(os, "{} (tid {}): unknown (its process moved to another scheduler during the "
                                   "snapshot)\n\n",
                               sched_name(t.sched.type, t.sched.no), t.tid);
                else if (t.sched.type == BB_SCHED_NORMAL)
                    fmt::print(os, "{} (tid {}): idle\n\n", sched_name(t.sched.type, t.sched.no), t.tid);
                continue;
            }
            const auto& [r, frames] = it->second;
            const std::string& name = s.names.name(r);
            fmt::print(os, "{} (tid {}): {}{}{}\n", sched_name(r.sched_type, r.sched_no), r.tid,
                       s.vm.format_pid(r.erl_pid), name.empty() ? "" : " ", printable(name));
            // Leaf first. A run of one function (deep recursion) is one line "NAME xN": 512
            // equal lines would push everything else out of sight.
            std::vector<std::string> labels;
            for (auto f = frames.rbegin(); f != frames.rend(); ++f)
                labels.push_back(printable(sym.frames().label(*f, o.lines)));
            for (auto l = labels.begin(); l != labels.end();) {
                auto run = std::find_if(l, labels.end(), [&](const std::string& m) { return m != *l; });
                if (run - l > 1) fmt::print(os, "    {} x{}\n", *l, run - l);
                else fmt::print(os, "    {}\n", *l);
                l = run;
            }
            fmt::print(os, "\n");
        }
        out.commit();
        return end_run(s, o, st, "samples");
    }

    Reporter rep(s, o, alloc ? "words" : "samples", {.rows = o.top, .flat = o.flat});
    auto st = run_loop(
        s, o, [&](const bb_record& r, std::span<const uint32_t> frames) { rep.add(r, frames); }, {},
        [&](uint64_t now) { rep.tick(now); });
    if (o.event == Event::alloc_gc && o.every == 0)
        rep.set_heading(fmt::format("{} words ({}) allocated on process heaps by the code on these stacks; {} more "
                                    "arrived in received messages and other heap fragments (counted apart); shares "
                                    "of words:",
                                    st.alloc_words, human_bytes(8 * st.alloc_words), st.frag_words));
    else if (alloc && o.every == 0)
        rep.set_heading(fmt::format("{} words ({}) allocated on process heaps (exact, from the VM's GC entries); {} "
                                    "more arrived in received messages and other heap fragments (counted apart). "
                                    "Shares of words from {} samples where the words were allocated (hardware "
                                    "watchpoints, one per ~{} words) and the heap fragments BIFs asked for:",
                                    st.alloc_words, human_bytes(8 * st.alloc_words), st.frag_words, st.watch_samples,
                                    cfg.alloc_interval));
    rep.finish(monotonic_ns());
    return end_run(s, o, st, alloc ? "allocation records" : "samples");
}

}  // namespace

int main(int argc, char** argv) {
    return guarded_main("beam-bpf-sample", [&] { return run(argc, argv); });
}
