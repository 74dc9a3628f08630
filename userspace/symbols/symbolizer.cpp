#include "symbols/symbolizer.hpp"

#include <fmt/format.h>

#include <cstring>

#include "base/text.hpp"

namespace bb {

Symbolizer::Symbolizer(const Vm& vm, FrameOptions opt)
    : vm_(vm),
      opt_(opt),
      jit_(vm.mem(), vm.symbol_address("__jit_debug_descriptor"), !vm.release().jit_unregisters),
      native_(vm.pid()),
      frames_(opt.raw_names) {
    unknown_jit_ = frames_.other(FrameKind::vm, "[unknown JIT code]", "[JIT]");
    kernel_ = frames_.other(FrameKind::kernel, "[kernel]", "[kernel]");
    no_process_ = frames_.other(FrameKind::vm, "[no Erlang process]", "beam.smp");
    for (auto [service, name] : {std::pair{Service::port, "[port]"},
                                 {Service::check_io, "[check_io]"},
                                 {Service::aux, "[aux]"},
                                 {Service::sleep, "[sleep]"},
                                 {Service::scheduling, "[scheduling]"}})
        service_frames_[static_cast<size_t>(service)] = frames_.other(FrameKind::vm, name, "beam.smp");
    bad_process_ = frames_.other(FrameKind::vm, "[unreadable Erlang process]", "beam.smp");
    in_gc_ = frames_.other(FrameKind::vm, "[gc]", "beam.smp");
    exiting_ = frames_.other(FrameKind::vm, "[exiting]", "beam.smp");
    beyond_scan_ = frames_.other(FrameKind::vm, "[truncated: stack deeper than the walk scans]", "beam.smp");
    unknown_native_ = frames_.other(FrameKind::native, "[unknown native code]", "[unknown]");
    unsampled_alloc_ = frames_.other(FrameKind::vm, "[allocation not sampled]", "beam.smp");
    refresh(0);
}

void Symbolizer::refresh(uint64_t now_ns) {
    now_ns_ = now_ns;
    // Walking the module list costs a read per module (thousands on big systems): once a
    // second catches purges, and misses catch new code. Not while the VM's code events flow:
    // they say exactly when; a walk sees changes whose events are still in the ring, ahead of
    // the samples before them, and its guessed instants would name those samples' code wrong.
    if (now_ns == 0 || (!code_events_ && now_ns - last_refresh_ns_ >= 1000000000ull)) reread_jit(now_ns);
}

void Symbolizer::follow_code_events(bool on, uint64_t now_ns) {
    if (on && !code_events_) {
        now_ns_ = now_ns;
        reread_jit(now_ns);  // what loaded before they started
    }
    code_events_ = on;
}

void Symbolizer::code_event(const bb_record& r) {
    JitCodeEvent e;
    e.registered = r.BB_CODE_EVENT_ACTION == BB_CODE_REGISTER;
    e.entry = r.BB_CODE_EVENT_ENTRY;
    e.symfile = r.frames[0];
    e.symfile_size = r.frames[1];
    for (size_t i = 0; i < e.head.size(); i++) e.head[i] = r.frames[2 + i];
    e.time_ns = r.time_ns;
    // The index reads a new module's symbols now, before it can be purged and freed, and
    // takes both instants from here rather than from its next walk.
    jit_.note(e);
    if (jit_.generation() != jit_generation_) {
        jit_generation_ = jit_.generation();
        cp_cache_.clear();
        leaf_cache_.clear();
    }
}

void Symbolizer::reread_jit(uint64_t now_ns) {
    last_refresh_ns_ = now_ns;
    jit_.refresh(now_ns);
    if (jit_.generation() != jit_generation_) {
        jit_generation_ = jit_.generation();
        cp_cache_.clear();
        leaf_cache_.clear();
    }
}

uint32_t Symbolizer::erlang_frame(uint64_t addr, uint64_t t, bool return_address) {
    auto& cache = return_address ? cp_cache_ : leaf_cache_;
    // A cached name is only valid for samples of the code's lifetime, and until the index
    // changes (the cache is dropped then).
    if (auto it = cache.find(addr); it != cache.end() && t >= it->second.from && t < it->second.until)
        return it->second.id;
    // A return address may sit just past its call's function: look up the call itself.
    auto hit = jit_.lookup(return_address ? addr - 1 : addr, t);
    if (!hit && !code_events_ && now_ns_ - last_refresh_ns_ >= 100000000ull) {
        // Code loaded since the last walk of the module list, most likely.
        reread_jit(now_ns_);
        hit = jit_.lookup(return_address ? addr - 1 : addr, t);
    }
    if (!hit) {
        unsymbolized_++;
        return unknown_jit_;
    }
    const JitRange& r = *hit->range;
    // Code before the function's first line entry (its prologue) is the function's first line.
    const JitLine* first = r.lines.empty() ? nullptr : &r.lines.front();
    const std::string* first_file = first ? &hit->module->files[first->file] : nullptr;
    uint32_t id = frames_.erlang(r.name, hit->module->name, hit->file ? hit->file : first_file, first ? first->line : 0,
                                 hit->line ? hit->line
                                 : first   ? first->line
                                           : 0);
    cache.insert_or_assign(addr, Cached{id, hit->valid_from, hit->valid_until});
    return id;
}

std::optional<uint32_t> Symbolizer::native_frame(uint64_t ip) {
    if (auto it = native_cache_.find(ip); it != native_cache_.end()) return it->second;
    if (auto r = native_ranges_.upper_bound(ip); r != native_ranges_.begin()) {
        --r;
        if (ip < r->second.first) {
            native_cache_.emplace(ip, r->second.second);
            return r->second.second;
        }
    }
    if (native_misses_.count(ip)) return std::nullopt;
    auto sym = native_.lookup(ip);
    if (!sym && now_ns_ - last_native_refresh_ns_ >= 1000000000ull) {
        // Maybe a NIF library loaded since we last looked. Re-reading every mapping is
        // costly: at most once a second, and misses are remembered until then.
        last_native_refresh_ns_ = now_ns_;
        native_.refresh();
        native_misses_.clear();
        sym = native_.lookup(ip);
    }
    if (!sym) {
        native_misses_.insert(ip);
        return std::nullopt;
    }
    if (sym->name.empty() && unwind_) {
        // No symbol (a static function of a stripped binary): its FDE's start names it, so
        // distinct functions never share one "[beam.smp]" bucket.
        if (auto f = unwind_->function_at(ip)) {
            uint32_t id = frames_.other(FrameKind::native, fmt::format("{}+{:#x}", sym->module, f->start), sym->module);
            native_cache_.emplace(ip, id);
            native_ranges_[f->start + f->bias] = {f->end + f->bias, id};
            return id;
        }
    }
    uint32_t id = frames_.other(FrameKind::native, sym->name.empty() ? fmt::format("[{}]", sym->module) : sym->name,
                                sym->module);
    // "[libcrypto.so.3]" may only mean that the unwind tables have not seen the library yet (a
    // NIF loaded a moment ago, its rows come with the next re-read of the mappings): not cached,
    // or hot addresses would keep that name for the rest of the run.
    if (!sym->name.empty() || !unwind_) native_cache_.emplace(ip, id);
    if (sym && !sym->name.empty() && sym->size) native_ranges_[ip - sym->offset] = {ip - sym->offset + sym->size, id};
    return id;
}

uint32_t Symbolizer::truncated_frame(uint32_t skipped) {
    return frames_.other(FrameKind::vm, fmt::format("[truncated {} frames]", skipped), "beam.smp");
}

bool Symbolizer::in_native_module(uint64_t addr) const {
    if (!unwind_) return true;
    for (const auto& m : unwind_->modules())
        if (addr >= m.start && addr < m.end) return true;
    return false;
}

uint32_t Symbolizer::kernel_frame(uint64_t ip) {
    if (auto it = kernel_cache_.find(ip); it != kernel_cache_.end()) return it->second;
    auto name = kernel_syms_.lookup(ip);
    uint32_t id = name ? frames_.other(FrameKind::kernel, *name, "[kernel]") : kernel_;
    kernel_cache_.emplace(ip, id);
    return id;
}

void Symbolizer::frames(const bb_record& r, std::vector<uint32_t>& out) {
    out.clear();
    uint64_t normal_exit = emulator() ? emulator()->normal_exit : 0;
    // frames[]: kernel, native, then Erlang, each leaf first (beam_bpf.h).
    const int nkernel = std::min<int>(r.nkernel, r.nframes), nnative = std::min<int>(r.nnative, r.nframes - nkernel);
    const int erlang = nkernel + nnative;
    auto caller = [&](uint64_t cp) {
        if (cp != normal_exit)
            out.push_back(erlang_frame(cp, r.time_ns, true));  // normal_exit: bottom of every stack, not a caller
    };
    int leaf_end = static_cast<int>(r.nframes);
    if (r.nskipped && leaf_end - erlang >= 2 * BB_ROOT_FRAMES) {
        // A truncated walk: the ring of root-most frames in its last slots, root first, then
        // the leaf-most frames under a frame that says how many are missing between. When the
        // scan's budget ended before the stack's bottom, the ring holds frames from its middle:
        // the leaf-most frames stand under a frame that says so instead.
        const uint64_t ring0 = static_cast<uint64_t>(leaf_end) - BB_ROOT_FRAMES,
                       found = leaf_end + uint64_t{r.nskipped};
        if (r.flags & BB_F_SCAN_LIMIT) {
            out.push_back(beyond_scan_);
        } else {
            for (uint64_t i = found; i-- > found - BB_ROOT_FRAMES;) caller(r.frames[BB_ROOT_SLOT(i, ring0)]);
            out.push_back(truncated_frame(r.nskipped));
        }
        leaf_end = static_cast<int>(ring0);
    }
    for (int i = leaf_end - 1; i >= erlang; i--) caller(r.frames[i]);
    auto native_or_unknown = [&](uint64_t ip) {
        if (auto id = native_frame(ip)) return *id;
        unsymbolized_++;
        return unknown_native_;
    };
    if (r.where == BB_WHERE_JIT) {
        uint32_t leaf = erlang_frame(r.ip, r.time_ns, false);
        if (!opt_.only_erlang || frames_.is_erlang(leaf)) out.push_back(leaf);
    } else if (!opt_.only_erlang && nnative > 0) {
        // Root first. The outermost may be the return address into JIT code where a scheduler
        // entered C (a BIF, a NIF, the collector): the Erlang function or VM routine that called.
        for (int i = erlang - 1; i >= nkernel; i--) {
            uint64_t a = r.frames[i];
            bool return_address = i > nkernel;
            if (return_address && i == erlang - 1 && !in_native_module(a)) {
                uint32_t id = erlang_frame(a, r.time_ns, true);
                out.push_back(id != unknown_jit_ ? id : unknown_native_);  // code in no file, nor the JIT's
                continue;
            }
            // A return address may be just past its function: name the call.
            out.push_back(native_or_unknown(return_address ? a - 1 : a));
        }
    } else if (!opt_.only_erlang) {
        out.push_back(native_or_unknown(r.ip));
    }
    if ((r.flags & BB_F_KERNEL) && !opt_.only_erlang) {
        if (nkernel == 0) out.push_back(kernel_);
        for (int i = nkernel - 1; i >= 0; i--) out.push_back(kernel_frame(i > 0 ? r.frames[i] - 1 : r.frames[i]));
    }
    // A process whose stack was not walked, and why, where its Erlang frames would be.
    if (r.flags & (BB_F_IN_GC | BB_F_EXITING)) out.insert(out.begin(), (r.flags & BB_F_IN_GC) ? in_gc_ : exiting_);
    // No process: rooted under what says so (and --by-process adds no root of its own). A
    // port task's work is its port's, under its connected process's root (reporter.hpp's who_of).
    if (!(r.flags & BB_F_PROC)) {
        if (opt_.only_erlang) out.clear();
        else if (r.flags & BB_F_PORT) out.insert(out.begin(), port_frame(r));
        else if (r.flags & BB_F_BAD_PROC) out.insert(out.begin(), bad_process_);
        else out.insert(out.begin(), service_root(out));
    }
}

namespace {

// The VM's own work on a thread that runs no process or port, by the leaf-most of its functions
// on the stack, in msacc's words (erts_msacc.h's states: check_io, aux, sleep, other). Exported
// functions, so that a stripped build names them too (but OTP 29's, built with
// -fvisibility=hidden: its debug file names them); aux_thread and handle_aux_work only a debug
// build names. erts_schedule, the scheduler's loop that finds the next process or port to run
// and wakes the other threads, is msacc's "other".
struct ServiceWork {
    std::string_view function;
    Symbolizer::Service service;
};
constexpr ServiceWork kServiceWork[] = {
    // A port task before it takes its port or after it has let it go (popping it, putting it
    // back on a run queue, whose lock it may wait for): about 1% of a port task's samples.
    {"erts_port_task_execute", Symbolizer::Service::port},
    {"erts_check_io", Symbolizer::Service::check_io},
    {"handle_aux_work", Symbolizer::Service::aux},
    {"aux_thread", Symbolizer::Service::aux},
    {"erts_alloc_handle_delayed_dealloc", Symbolizer::Service::aux},
    {"ethr_event_wait", Symbolizer::Service::sleep},
    {"ethr_event_twait", Symbolizer::Service::sleep},
    {"erts_schedule", Symbolizer::Service::scheduling},
};

// The VM's ways into a garbage collection, exported (the JIT's call of the collector is named
// by the JIT itself): msacc's gc state is the collector's time inside them.
constexpr std::string_view kCollector[] = {
    "global::garbage_collect",       "erts_garbage_collect_nobump",  "erts_garbage_collect",
    "erts_gc_after_bif_call_lhf",    "erts_gc_after_bif_call",       "erts_garbage_collect_hibernate",
    "erts_garbage_collect_literals", "erts_garbage_collect_request",
};

}  // namespace

SchedState Symbolizer::sched_state(const bb_record& r, std::span<const uint32_t> stack) {
    if (r.flags & BB_F_PORT) return SchedState::port;
    if (r.flags & BB_F_PROC) {
        if (r.flags & BB_F_IN_GC) return SchedState::gc;
        for (size_t i = 0; i < stack.size(); i++) {
            auto [known, added] = process_state_.try_emplace(stack[i], SchedState::emulator);
            if (added) {
                const std::string& name = frames_.function(stack[i]).system_name;
                for (std::string_view gc : kCollector)
                    if (name == gc) known->second = SchedState::gc;
                // msacc counts a process's own call of a driver's output callback
                // (port_command/2: erts_port_output's call_driver_outputv) as port.
                if (name == "erts_port_output") known->second = SchedState::port;
            }
            if (known->second == SchedState::gc) return SchedState::gc;
            if (known->second == SchedState::port && i + 1 < stack.size()) return SchedState::port;
        }
        return SchedState::emulator;
    }
    if (stack.empty()) return SchedState::other;
    const uint32_t root = stack.front();
    if (root == service_frames_[static_cast<size_t>(Service::port)]) return SchedState::port;
    if (root == service_frames_[static_cast<size_t>(Service::check_io)]) {
        // A scheduler with nothing to run may sleep in the poll itself (scheduler_wait calls
        // erts_check_io with a timeout): msacc counts the wait in erts_poll_wait as sleep, the
        // rest as check_io. Called from erts_schedule itself, the poll does not wait.
        bool from_schedule = false, waits = false;
        for (size_t i = 1; i < stack.size(); i++) {
            const std::string& name = frames_.function(stack[i]).system_name;
            if (name == "erts_check_io") from_schedule = frames_.function(stack[i - 1]).system_name == "erts_schedule";
            waits |= name == "erts_poll_wait";
        }
        return waits && !from_schedule ? SchedState::sleep : SchedState::check_io;
    }
    if (root == service_frames_[static_cast<size_t>(Service::aux)]) return SchedState::aux;
    if (root == service_frames_[static_cast<size_t>(Service::sleep)]) return SchedState::sleep;
    return SchedState::other;  // the scheduler's loop, or what no function names
}

uint32_t Symbolizer::service_root(const std::vector<uint32_t>& stack) {
    for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
        auto [known, added] = service_of_.try_emplace(*it, Service::none);
        if (added) {
            const Function& f = frames_.function(*it);
            for (const auto& w : kServiceWork)
                if (f.kind == FrameKind::native && f.system_name == w.function) known->second = w.service;
        }
        if (known->second != Service::none) return service_frames_[static_cast<size_t>(known->second)];
    }
    return no_process_;
}

uint32_t Symbolizer::port_frame(const bb_record& r) {
    // The name is the target's bytes, cut at the record's room: made printable, and one frame
    // per name, not per port (ports come and go by the thousand; their owners tell them apart).
    const size_t n = strnlen(r.port_name, sizeof(r.port_name));
    std::string name = printable(std::string_view(r.port_name, n));
    if (auto it = port_frames_.find(name); it != port_frames_.end()) return it->second;
    uint32_t id = frames_.other(FrameKind::vm, name.empty() ? "[port]" : fmt::format("[port {}]", name), "beam.smp");
    if (port_frames_.size() < kMaxPortFrames) port_frames_.emplace(std::move(name), id);
    return id;
}

}  // namespace bb
