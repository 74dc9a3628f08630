#include "run/session.hpp"

#include <unistd.h>

#include <fmt/format.h>

#include "base/clock.hpp"
#include "base/text.hpp"
#include "inspect/find_process.hpp"
#include "target/discovery.hpp"
#include "target/proc_maps.hpp"

namespace bb {

namespace {
const CommonOptions& resolved(CommonOptions& o) {
    resolve(o);
    return o;
}
// `vm`, once `t` has the step that ended now: for the member initializers, which run in turn.
// The first (step empty) takes the VM's own steps of attach().
const Vm& after(StageTimes& t, const Vm& vm, const char* step) {
    if (step) t.mark(step);
    else t.append(vm.attach_times());
    return vm;
}
}  // namespace

void print_attached(const Vm& vm, std::string_view native, std::string_view what, std::string_view events_note) {
    const char* tool = tool_name();
    auto p = read_beam("/proc", vm.pid());
    const std::string node = p ? labels_of(*p).node : "";
    fmt::print(stderr, "{}\n",
               printable(fmt::format("{}: attached to {} (pid {}, {}OTP {}); {}{}", tool, vm.exe_name(), vm.pid(),
                                     node.empty() ? "" : node + ", ", vm.release().major, what, native)));
    // Not the common case: its own line, as it changes what the run costs the host.
    if (!events_note.empty()) fmt::print(stderr, "{}: sampled through {}\n", tool, printable(events_note));
}

// Member order is the order of the checks: bad options, then an unwritable -o, then
// privileges, then the VM.
Session::Session(CommonOptions& o)
    : out(resolved(o)),
      vm((check_privileges(), Vm::attach(o.pid, o.offsets_file, o.wait_for_boot))),
      sym(after(attach_times, vm, nullptr), {.only_erlang = o.only_erlang, .raw_names = o.raw_names}),
      names(after(attach_times, vm, "JIT index"), o.raw_names),
      verbose(o.verbose) {
    attach_times.mark("atoms and names");
    if (o.process.empty()) return;
    only_pid = find_process(vm, names, o.process, "--process");
    if (!o.process.starts_with('<'))
        fmt::print(stderr, "{}: --process {} is {}\n", tool_name(), o.process, vm.format_pid(*only_pid));
    attach_times.mark("--process");
}

void Session::start(SamplerConfig cfg, const std::string& what, SharedSampling* shared) {
    const char* tool = tool_name();
    // The unwind tables and the kernel's check of the walker take about half a second, more on
    // a busy machine: a terminal is told what is going on meanwhile, on a line the attach line
    // then takes the place of.
    struct ProgressLine {  // erased however this ends: an error's line starts a line of its own
        bool on;
        void end() {
            if (on) fmt::print(stderr, "\r\33[K");
            on = false;
        }
        ~ProgressLine() { end(); }
    } progress{isatty(STDERR_FILENO) && !(shared && shared->walker)};
    if (progress.on) {
        fmt::print(stderr, "{}: attaching: {}loading the walker into the kernel...", tool,
                   cfg.max_native_frames || !cfg.blame_ranges.empty() ? "unwind tables, " : "");
        fflush(stderr);
    }
    cfg.frame_layout = sym.emulator() ? sym.emulator()->frame_layout : 0;
    if (only_pid) cfg.only_pid = {*only_pid, vm.release().pids.mask()};
    std::string native = "Erlang frames only";
    if (cfg.max_native_frames || !cfg.blame_ranges.empty()) {
        uint64_t t0 = monotonic_ns();
        unwind_store = shared && shared->unwind ? *shared->unwind : SharedUnwind::create(kOwnUnwindRows);
        unwind.emplace(vm.pid(), unwind_store.store);
        cfg.unwind = &*unwind;
        cfg.unwind_maps = unwind_store.maps.get();
        sym.set_unwind(&*unwind);
        native = fmt::format("native frames from {} unwind rows of {} files ({}, {:.0f} ms)", unwind->rows(),
                             unwind->modules().size(), human_bytes(unwind->table_bytes()), (monotonic_ns() - t0) / 1e6);
        attach_times.mark("unwind tables");
    }
    // The agent's walker is loaded with the first VM's config: every VM's is the same but for
    // what the walker looks up per VM (offsets, frame layout, code, unwind modules).
    if (shared && !shared->walker) shared->walker = std::make_shared<Walker>(cfg, shared->max_vms);
    sampler.emplace(vm, cfg, shared ? shared->walker : nullptr);
    attach_times.mark("BPF load and attach");
    start_ns = monotonic_ns();
    start_unix_ns = unix_now_ns();
    auto c = sampler->counters();
    sym.follow_code_events(c.code_events_off.empty(), monotonic_ns());
    progress.end();
    if (!c.code_events_off.empty())
        fmt::print(stderr,
                   "{}: warning: code loads and purges are timed by re-reading the module list ({}); "
                   "a sample in code reloaded within about a second may go unnamed, or be named from the version "
                   "before\n",
                   tool, c.code_events_off);
    // Paths and names in these lines are the target's text: printable (base/text.hpp).
    if (verbose)
        fmt::print(stderr, "{}\n",
                   printable(fmt::format(
                       "{}: attached to {} (pid {}, {}, build-id {}), offsets from {}{}, {} JIT modules{}, {}, {}{}",
                       tool, vm.exe(), vm.pid(), vm.build().describe(), vm.elf().build_id(), vm.offsets().origin,
                       vm.symbols_origin().empty() ? "" : ", globals from the " + vm.symbols_origin(),
                       sym.jit().module_count(), cfg.frame_layout == 1 ? " (frame pointers)" : "", native, what,
                       sampler->events_note().empty() ? "" : "; sampled through " + sampler->events_note())));
    else print_attached(vm, unwind ? "" : ", Erlang frames only", what, sampler->events_note());
    if (verbose) {
        std::string steps;
        double all = 0;
        for (const auto& [step, ms] : attach_times.ms()) {
            steps += fmt::format("{}{} {:.0f}", steps.empty() ? "" : ", ", step, ms);
            all += ms;
        }
        fmt::print(stderr, "{}: attaching took {:.0f} ms: {} (ms)\n", tool, all, steps);
    }
    if (unwind)
        for (const auto& why : unwind->skipped())
            fmt::print(stderr, "{}: warning: no native frames through {}\n", tool, printable(why));
    if (!vm.caveat().empty()) fmt::print(stderr, "{}: warning: {}\n", tool, printable(vm.caveat()));
    if (!names.unavailable().empty())
        fmt::print(stderr, "{}: warning: processes are shown by pid only: {}\n", tool, printable(names.unavailable()));
}

SamplerConfig::Probe entry_probe(const Vm& vm, const NativeMatch& m) {
    // Through the file the tool opened and checked (target/target_file.hpp): the kernel opens
    // /proc/self/fd/N, a link in this process's own descriptor table, i.e. that very inode.
    if (!m.opened) return {nullptr, vm.exe_file().fd_path(), m.sym.file_offset};
    return {m.opened, m.opened->fd_path(), m.sym.file_offset};
}

std::string add_alloc_probes(Session& s, SamplerConfig& cfg) {
    const Vm& vm = s.vm;
    std::string missing;
    const auto entries = vm.release().gc_entry_points;
    for (std::string_view f : entries) {
        try {
            for (const NativeMatch& m : resolve_functions(vm, std::string(f), /*exact=*/true)) {
                cfg.entry_probes.push_back(entry_probe(vm, m));
                if (cfg.alloc_interval) {  // where a collection returns: the watchpoints' coin flip
                    cfg.entry_probes.push_back(cfg.entry_probes.back());
                    cfg.entry_probes.back().gc_return = true;
                }
            }
        } catch (const UserError&) {
            if (f == entries.front()) throw;
            missing += (missing.empty() ? "" : ", ") + std::string(f);
        }
    }
    // A process's last epoch, from its last collection to its end, counted where it ends
    // (erts_do_exit_process: every exit, normal or not, with the process current and its heap
    // top saved): the words of a process that lives a few milliseconds are mostly there, and
    // its watch, if it has one, ends with it rather than 100 ms later.
    if (cfg.alloc_interval) {
        try {
            for (const NativeMatch& m : resolve_functions(vm, "erts_do_exit_process", /*exact=*/true)) {
                cfg.entry_probes.push_back(entry_probe(vm, m));
                s.alloc_exits.push_back(m.start);
            }
        } catch (const UserError&) {
            missing += std::string(missing.empty() ? "" : ", ") + "erts_do_exit_process";
        }
    }
    for (const NativeMatch& m : resolve_functions(vm, "erts_heap_alloc", /*exact=*/true)) {
        cfg.entry_probes.push_back(entry_probe(vm, m));
        cfg.entry_probes.back().heap_alloc = true;
    }
    return missing;
}

}  // namespace bb
