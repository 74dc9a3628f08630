#include "run/wall_profile.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <iterator>

#include "inspect/process_table.hpp"
#include "report/report.hpp"

namespace bb {

std::string receive_frame(int64_t queue_len) {
    if (queue_len <= 0) return std::string(kIdleReceiveLeaf);
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

}  // namespace

WallProfile::WallProfile(Session& s, uint32_t per_tick, uint32_t max_frames, const std::string& process_option)
    : s_(s),
      max_frames_(max_frames),
      table_(process_table_ref(s.vm.mem(), s.vm.offsets(), s.vm.symbol_address("erts_proc"))),
      truncated_(s.sym.pseudo_frame(fmt::format("[truncated: stack deeper than {} words]", kStackWordsPerProcess))),
      not_read_(s.sym.pseudo_frame("[stack not read: the tick's word budget was spent]")),
      idle_receive_(s.sym.pseudo_frame(receive_frame(0))),
      hibernated_(s.sym.pseudo_frame(std::string(kHibernatedLeaf))),
      record_(std::make_unique<bb_record>()) {
    Symbolizer& sym = s.sym;
    const CodeView code{.in_code =
                            [this, &sym](uint64_t addr) {
                                auto hit = sym.jit().lookup(addr, now_);
                                return hit && hit->range;
                            },
                        .normal_exit = sym.emulator() ? sym.emulator()->normal_exit : 0};
    const Vm& vm = s.vm;
    sampler_ = std::make_unique<WallSampler>(
        vm.mem(), vm.offsets(), table_, code,
        WallConfig{.per_tick = per_tick,
                   // As the VM names them, whatever --raw-names says.
                   .in_monitored_call =
                       [this, &sym](uint64_t addr) {
                           auto hit = sym.jit().lookup(addr, now_);
                           return hit && hit->range &&
                                  std::ranges::find(kMonitoredCalls, hit->range->name) != std::end(kMonitoredCalls);
                       },
                   .slot_of = [&vm](uint64_t pid) { return vm.process_slot(pid); }});
    if (s.only_pid) {
        // Its Process, found once in the table; each tick reads it alone.
        // only_pid is masked (the bits that name the process, as the walker compares them).
        const uint64_t mask = vm.release().pids.mask();
        std::optional<ProcessEntry> found;
        for (const ProcessEntry& e : read_process_table(vm).processes)
            if ((e.pid & mask) == *s.only_pid) found = e;
        if (!found) throw UserError(fmt::format("--process {}: no such process", process_option));
        sampler_->only(found->c_p, found->pid);
    }
}

// "[waiting for bb_server, pid 0.90.0]": the callee's name (registered, else as processes are
// named) and pid; "[waiting for ?]" when the VM's bookkeeping of the call was not found. The pid
// without its angle brackets: pprof's viewers cut "<...>" out of function names (C++ template
// arguments), which left "[waiting for bb_server ]".
std::string WallProfile::callee_frame(const WallProcess& w) {
    if (w.call != WallProcess::Call::named) return "[waiting for ?]";
    const ProcessEntry& c = w.callee;
    const std::string name = c.c_p ? s_.names.name(c.pid, c.c_p, c.reg_name, c.initial) : "";
    std::string pid = s_.vm.format_pid(c.pid);
    if (pid.size() > 2 && pid.front() == '<' && pid.back() == '>') pid = pid.substr(1, pid.size() - 2);
    return fmt::format("[waiting for {}{}pid {}]", name, name.empty() ? "" : ", ", pid);
}

void WallProfile::tick(uint64_t now_ns, const OnStack& on_stack) {
    Symbolizer& sym = s_.sym;
    now_ = now_ns;
    sym.refresh(now_ns);
    WallTick t = sampler_->tick();
    // The process time since the last tick, shared by the processes kept: each stands for
    // live / kept processes over that time (the first tick: over none, it starts the clock).
    const uint64_t dt = n_.ticks ? now_ns - last_tick_ : 0;
    last_tick_ = now_ns;
    n_.ticks++;
    n_.live += t.live;
    n_.exited += t.exited;
    n_.changed += t.changed;
    n_.unreadable += t.unreadable;
    n_.calls_named += t.calls_named;
    n_.calls_unknown += t.calls_unknown;
    n_.slot_bytes += t.slot_bytes;
    n_.process_reads += t.process_reads;
    n_.words += t.words;
    if (t.kept() == 0 || dt == 0) return;
    const auto weight = static_cast<uint64_t>(static_cast<double>(t.live) * static_cast<double>(dt) /
                                              static_cast<double>(t.kept()));
    for (const WallProcess& w : t.processes) {
        const ProcessEntry& p = w.stack.proc;
        const bool read = w.stack.outcome == ProcessStack::Outcome::read;
        n_.kept++;
        n_.read += read;
        n_.busy += !read && !w.not_read;
        n_.not_read += w.not_read;
        n_.truncated += read && w.stack.words_unread;
        fill_record(*record_, w.stack, now_ns, max_frames_);
        sym.frames(*record_, frames_);
        // The VM's process states, as process_info(P, status) names them: each a root frame.
        auto [root, added] = roots_.try_emplace(p.status(), 0);
        if (added) root->second = sym.pseudo_frame(fmt::format("[{}]", p.status()));
        stack_.assign(1, root->second);
        if (w.not_read) stack_.push_back(not_read_);
        if (read && w.stack.words_unread) stack_.push_back(truncated_);
        stack_.insert(stack_.end(), frames_.begin(), frames_.end());
        const bool trampoline = read && w.stack.scan.cps.empty() && !stack_.empty() &&
                                sym.frames().function(stack_.back()).system_name == kRunProcess;
        if (trampoline) stack_.back() = sym.pseudo_frame(run_process_frame(p));
        else if (w.call != WallProcess::Call::none) stack_.push_back(sym.pseudo_frame(callee_frame(w)));
        else if (read && std::string_view(p.status()) == "waiting")
            stack_.push_back(sym.pseudo_frame(receive_frame(p.msgq_len)));
        on_stack(*record_, stack_, weight);
        n_.weight_ns += weight;
    }
}

}  // namespace bb
