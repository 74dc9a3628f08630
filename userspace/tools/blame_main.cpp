// beam-bpf-blame: which Erlang code is on the stack while the VM runs a native function.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>

#include "base/clock.hpp"
#include "base/text.hpp"
#include "base/usage.hpp"
#include "find/find_vm.hpp"
#include "run/events.hpp"
#include "run/reporter.hpp"
#include "run/run_loop.hpp"
#include "run/session.hpp"

using namespace bb;

namespace {

int run(int argc, char** argv) {
    CLI::App app{
        "beam-bpf-blame: which Erlang code is on the stack while a running BEAM VM executes a native\n"
        "function, e.g. `beam-bpf-blame erts_garbage_collect PID` for who triggers GC.\n"
        "FUNC names a symbol of beam.smp (or of a library the VM has loaded), matched as a name prefix\n"
        "unless --exact; the matched symbols are printed. On OTP 25, erts_garbage_collect covers\n"
        "erts_garbage_collect_nobump (how the JIT enters GC), _hibernate and _literals, but NOT\n"
        "erts_gc_after_bif_call_lhf (GC after a BIF): name both, erts_garbage_collect,erts_gc_after_bif_call_lhf.\n"
        "Default: sampling; a sample counts while FUNC is executing, i.e. the IP is in FUNC or a return\n"
        "address into it is on the scheduler's native stack (bounded scan). Each Erlang function is\n"
        "counted once per sample. Several functions: the table starts with the samples each was in.\n"
        "--count: exact calls, from an entry probe on FUNC."};
    CommonOptions o;
    std::string func;
    bool exact = false, count_calls = false;
    app.add_option("FUNC", func,
                   "native function name (prefix), or several: FUNC,FUNC,... (erts_garbage_collect,"
                   "erts_gc_after_bif_call_lhf: GC from JIT code and after BIFs)")
        ->required();
    add_common_options(app, o);
    // beam-bpf-sample's other modes are not blame's: their options are not in its --help.
    for (const char* name : {"-e", "--threshold", "--watchpoints-in-vm"}) app.remove_option(app.get_option(name));
    app.add_option_function<std::string>(
        "-e,--event",
        [&o](const std::string& name) {
            const EventMode* m = mode_named(name);
            if (m && m->perf_sampled) return void(o.event = m->event);
            throw UserError(fmt::format("-e {}: beam-bpf-blame samples {}{}", name, event_names(true, "or"),
                                        m ? fmt::format("; -e {} is beam-bpf-sample's", name) : ""));
        },
        "what counts towards a sample: cpu-clock (default: CPU time, works everywhere) or cycles (CPU cycles from "
        "the hardware PMU; not in most VMs)");
    app.add_flag("--exact", exact, "match FUNC exactly instead of as a prefix");
    app.add_flag("--count", count_calls,
                 "count every call of FUNC (entry uprobe) by Erlang stack instead of sampling time");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return usage_error(app, e);
    }
    // The options first (a bad one is the only line), then which VM.
    resolve(o);
    o.pid = find_vm(o.targets, o.node);
    Session s(o);
    auto& vm = s.vm;
    auto& sampler_slot = s.sampler;
    // FUNC[,FUNC...]: each matched as a FUNC alone is; a function two of them match, once.
    std::vector<NativeMatch> found;
    for (size_t at = 0; at <= func.size();) {
        const size_t comma = std::min(func.find(',', at), func.size());
        const std::string one = func.substr(at, comma - at);
        if (one.empty()) throw UserError(fmt::format("{}: an empty function name between commas", func));
        for (NativeMatch& m : resolve_functions(vm, one, exact))
            if (std::none_of(found.begin(), found.end(), [&](const NativeMatch& f) { return f.start == m.start; }))
                found.push_back(std::move(m));
        at = comma + 1;
    }
    // "watching A, B and 3 more": within ~120 columns, as the attach line is; -v names every
    // function and the file. The binary's text: printable wherever it goes (base/text.hpp).
    std::string names;
    for (size_t i = 0; i < found.size(); i++) {
        const std::string name = printable(found[i].sym.name);
        const std::string more = fmt::format(" and {} more (-v lists them)", found.size() - i);
        if (!o.verbose && i > 0 && names.size() + name.size() + more.size() > 80) {
            names += more;
            break;
        }
        names += (i ? ", " : "") + name;
    }

    SamplerConfig cfg = sampler_config(o);
    for (const auto& m : found) {
        if (count_calls) {
            cfg.entry_probes.push_back(entry_probe(vm, m));
        } else {
            cfg.blame_ranges.push_back({m.start, m.start + m.sym.size});
        }
    }
    s.start(cfg, count_calls ? fmt::format("{} entry probes", found.size()) : "sampling " + describe_event(o));
    // After attaching: an error before then is the run's only line.
    fmt::print(stderr, "beam-bpf-blame: watching {}{}\n", names,
               o.verbose ? " (" + printable(found.front().file) + ")" : "");
    Sampler& sampler = *sampler_slot;

    const char* unit = count_calls ? "calls" : "samples";
    Reporter rep(s, o, unit, {.rows = o.top, .by_total = true, .erlang_only = true});
    // Which function each sample was in, for the split above the table: the leaf-most native
    // frame in one (the ip, then return addresses). The last slot: a stack-word scan's match,
    // whose address the record does not keep.
    std::vector<uint64_t> in_function(found.size() + 1);
    auto function_of = [&](const bb_record& r) {
        auto in = [&](uint64_t at) {
            for (size_t i = 0; i < found.size(); i++)
                if (at >= found[i].start && at < found[i].start + found[i].sym.size) return i;
            return found.size();
        };
        if (size_t i = in(r.ip); i < found.size()) return i;
        const size_t first = r.nkernel, end = std::min<size_t>(first + r.nnative, BB_MAX_FRAMES);
        for (size_t k = first + 1; k < end; k++)  // return addresses: one past their call
            if (size_t i = in(r.frames[k] - 1); i < found.size()) return i;
        return found.size();
    };
    auto st = run_loop(
        s, o,
        [&](const bb_record& r, std::span<const uint32_t> frames) {
            rep.add(r, frames);
            in_function[function_of(r)]++;
        },
        {}, [&](uint64_t now) { rep.tick(now); });
    const uint64_t seen = sampler.counters().bpf[BB_C_SEEN];
    const std::string which = found.size() == 1 ? names : fmt::format("the {} functions", found.size());
    if (st.records == 0) {
        fmt::print(stderr, "beam-bpf-blame: 0 {}: {} did not run{} during the {:.1f} s\n", unit, which,
                   o.process.empty() ? "" : " for " + o.process, st.seconds);
    } else if (!count_calls) {
        fmt::print(stderr, "beam-bpf-blame: {} ran in {} of the VM's {} samples ({:.1f}%)\n", which, st.records, seen,
                   seen ? 100.0 * st.records / seen : 0.0);
    }
    if (st.records && o.every == 0) {
        const std::string per = count_calls ? "call" : "sample";
        if (found.size() == 1) {
            rep.set_heading(fmt::format("{} {} of {}; Erlang functions on those stacks, each counted once per {}:",
                                        st.records, unit, names, per));
        } else {
            // Several functions: how many of the run's samples each was in, then the one table.
            std::string h = fmt::format("{} {} in {} functions:\n{:>8}  FUNCTION\n", st.records, unit, found.size(),
                                        count_calls ? "CALLS" : "SAMPLES");
            for (size_t i = 0; i <= found.size(); i++)
                if (in_function[i])
                    h += fmt::format("{:>8}  {}\n", in_function[i],
                                     i < found.size()
                                         ? printable(found[i].sym.name)  // the binary's text
                                         : std::string("(found by the stack scan: which one is not known)"));
            rep.set_heading(h + fmt::format("Erlang functions on those stacks, each counted once per {}:", per));
        }
    }
    rep.finish(monotonic_ns());
    return end_run(s, o, st, unit);
}

}  // namespace

int main(int argc, char** argv) {
    return guarded_main("beam-bpf-blame", [&] { return run(argc, argv); });
}
