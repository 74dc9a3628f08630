#include "run/offcpu.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <cstdlib>
#include <utility>

#include "base/clock.hpp"
#include "base/text.hpp"
#include "run/events.hpp"
#include "run/reporter.hpp"
#include "run/run_loop.hpp"
#include "target/discovery.hpp"

namespace bb {

namespace {
constexpr uint64_t kFutex = 202;
}  // namespace

std::string syscall_name(uint64_t nr) {
    // The calls a VM's threads block in (x86-64 numbers, asm/unistd_64.h).
    // clang-format off
    static constexpr std::array<std::pair<uint64_t, const char*>, 45> kNames{{
        {0, "read"},         {1, "write"},          {3, "close"},         {7, "poll"},
        {17, "pread64"},     {18, "pwrite64"},      {19, "readv"},        {20, "writev"},
        {23, "select"},      {24, "sched_yield"},   {34, "pause"},        {35, "nanosleep"},
        {42, "connect"},     {43, "accept"},        {44, "sendto"},       {45, "recvfrom"},
        {46, "sendmsg"},     {47, "recvmsg"},       {61, "wait4"},        {72, "fcntl"},
        {73, "flock"},       {74, "fsync"},         {75, "fdatasync"},    {128, "rt_sigtimedwait"},
        {202, "futex"},      {217, "getdents64"},   {230, "clock_nanosleep"}, {232, "epoll_wait"},
        {257, "openat"},     {270, "pselect6"},     {271, "ppoll"},       {281, "epoll_pwait"},
        {288, "accept4"},    {2, "open"},           {9, "mmap"},          {11, "munmap"},
        {10, "mprotect"},    {426, "io_uring_enter"}, {441, "epoll_pwait2"}, {449, "futex_waitv"},
        {82, "rename"},      {87, "unlink"},        {83, "mkdir"},        {263, "unlinkat"},
        {264, "renameat"},
    }};
    // clang-format on
    for (const auto& [n, name] : kNames)
        if (n == nr) return name;
    return fmt::format("syscall {}", static_cast<int64_t>(nr));
}

std::string thread_wait_frame(std::string_view comm) {
    // The VM names its threads "N_poller", "N_aux", "sys_sig_dispatcher", "async_N", ... (cut to
    // 15 bytes by the kernel): the role without its number.
    std::string role;
    for (char c : comm)
        if (std::isalpha(static_cast<unsigned char>(c)) || (c == '_' && !role.empty())) role += c;
    while (!role.empty() && role.back() == '_') role.pop_back();
    // OTP 25 names them "N_poller", "N_aux", "sys_sig_dispatcher", ...; OTP 26 and later
    // "erts_poll", "erts_aux", "erts_ssig_disp", ...
    if (role == "poller" || role == "erts_poll") return "[poll thread waiting]";
    if (role == "aux" || role == "erts_aux") return "[aux thread waiting]";
    if (role.starts_with("sys_sig_dispatc") || role == "erts_ssig_disp") return "[signal dispatcher waiting]";
    if (role.starts_with("sys_msg_dispatc") || role == "erts_smsg_disp") return "[system message dispatcher waiting]";
    if (role == "async" || role == "erts_async") return "[async thread waiting]";
    if (role == "beam.smp" || role == "beamsmp") return "[main thread waiting]";
    return fmt::format("[thread {}]", role.empty() ? "?" : role);
}

// In a BIF of the ets module (called through call_light_bif_shared) a futex wait is on the
// table's lock, and the table is the BIF's first argument, in X register 0: a named table by its
// name, another as "unnamed" (its reference names no table from outside yet). Which BIF: the
// Export entry the JIT's call_light_bif_shared keeps in the scheduler's TMP_MEM while the BIF
// runs (so on a stripped build too, whose C functions have no names).
std::string OffcpuStacks::ets_lock(const bb_record& r) {
    if (!r.bif_export) return "";
    if (!atoms_) atoms_.emplace(s_.vm);
    // Export entries stay where they are: each BIF's module is read once (a bounded cache).
    auto known = ets_export_.find(r.bif_export);
    bool ets = known != ets_export_.end() && known->second;
    if (known == ets_export_.end()) {
        auto module = s_.vm.mem().read<uint64_t>(r.bif_export + s_.vm.offsets().export_mfa);
        ets = module && atoms_->text(*module) == "ets";
        if (ets_export_.size() < 4096) ets_export_.emplace(r.bif_export, ets);
    }
    if (!ets) return "";
    if (auto name = atoms_->text(r.x0)) return fmt::format("ets table {}", printable(*name));
    return "ets table, unnamed";
}

// Each scheduler's run queue: a normal scheduler's own, the dirty schedulers' shared one of their
// kind. A thread enqueuing a process, or a scheduler choosing its next one, blocks on the queue's
// mutex itself (a pthread mutex: the futex is its first word).
const std::string* OffcpuStacks::run_queue_lock(uint64_t futex) {
    if (!run_queue_locks_) {
        run_queue_locks_.emplace();
        const VmOffsets& o = s_.vm.offsets();
        for (const SchedThread& t : s_.vm.sched_threads()) {
            auto rq = s_.vm.mem().read<uint64_t>(t.sched.esdp + o.esd_run_queue);
            if (!rq || !*rq) continue;
            std::string name = t.sched.type == BB_SCHED_NORMAL ? fmt::format("run queue of scheduler {}", t.sched.no)
                               : t.sched.type == BB_SCHED_DIRTY_CPU ? "dirty cpu run queue"
                                                                    : "dirty io run queue";
            run_queue_locks_->try_emplace(*rq + o.runq_mtx, std::move(name));
        }
    }
    auto it = run_queue_locks_->find(futex);
    return it == run_queue_locks_->end() ? nullptr : &it->second;
}

std::string OffcpuStacks::lock_name(const bb_record& r, std::span<const uint32_t> frames) {
    if (const std::string* rq = run_queue_lock(r.BB_OFFCPU_ARG0)) return *rq;
    if (!(r.flags & BB_F_PROC)) return "";
    bool light_bif = false, proc_lock = false;  // one pass over the frames for both
    for (uint32_t f : frames) {
        const std::string& name = s_.sym.frames().function(f).name;
        light_bif |= name == "global::call_light_bif_shared";
        proc_lock |= name == "erts_proc_lock_failed";
    }
    if (light_bif)
        if (std::string ets = ets_lock(r); !ets.empty()) return ets;
    return proc_lock ? "a process's lock" : "";
}

bool OffcpuStacks::idle(uint32_t root) const { return idle_frames_.count(root) > 0; }

uint32_t OffcpuStacks::pseudo(const std::string& name) {
    auto [it, added] = frames_.try_emplace(name, 0);
    if (added) {
        it->second = s_.sym.pseudo_frame(name);
        // The roots of waiting for work: a scheduler's idle, a service thread's wait.
        if (name == "[scheduler idle]" || name.ends_with(" waiting]")) idle_frames_.insert(it->second);
    }
    return it->second;
}

const std::string& OffcpuStacks::thread_name(uint32_t tid) {
    auto it = names_.find(tid);
    if (it != names_.end()) return it->second;
    for (const auto& t : s_.vm.threads()) names_[static_cast<uint32_t>(t.tid)] = t.name;
    return names_[tid];  // "" if gone already
}

void OffcpuStacks::stack(const bb_record& r, std::span<const uint32_t> frames, std::vector<uint32_t>& out) {
    // A port task's block is its port's (the symbolizer's root, "[port tcp_inet]"): not idle.
    const bool process = r.flags & (BB_F_PROC | BB_F_PORT);
    const uint64_t call = r.BB_OFFCPU_SYSCALL;
    const std::string lock = call == kFutex ? lock_name(r, frames) : "";
    out.clear();
    if (r.sched_type == BB_SCHED_NONE) out.push_back(pseudo(thread_wait_frame(thread_name(r.tid))));
    else if (!process && lock.empty()) out.push_back(pseudo("[scheduler idle]"));
    else if (!process) out.push_back(pseudo(fmt::format("[{} scheduling]", sched_name(r.sched_type, r.sched_no))));
    out.insert(out.end(), frames.begin(), frames.end());
    if (!lock.empty()) out.push_back(pseudo(fmt::format("[lock: {}]", lock)));
    else if (process && call == kFutex) out.push_back(pseudo("[lock]"));
    out.push_back(pseudo(fmt::format("[syscall {}]", syscall_name(call))));
}

void OffcpuStacks::unwalked(uint32_t tid, std::vector<uint32_t>& out) {
    if (scheds_.empty())
        for (const SchedThread& t : s_.vm.sched_threads()) scheds_[static_cast<uint32_t>(t.tid)] = t;
    out.clear();
    auto sched = scheds_.find(tid);
    if (sched == scheds_.end()) {
        out.push_back(pseudo(thread_wait_frame(thread_name(tid))));
    } else {
        // A scheduler with no process now is idle; one blocked while it runs a process is named
        // by its number (the process's stack is not walked from here).
        auto c_p = s_.vm.mem().read<uint64_t>(sched->second.sched.esdp + s_.vm.offsets().esd_current_process);
        out.push_back(pseudo(c_p && *c_p == 0 ? "[scheduler idle]"
                                              : fmt::format("[{} blocked]", sched_name(sched->second.sched.type,
                                                                                       sched->second.sched.no))));
    }
    out.push_back(pseudo("[blocked at the end: not walked]"));
    // "202 0x7f.. ..." (the call and its arguments), "running", or nothing (gone).
    const std::string call = read_bounded(fmt::format("/proc/{}/task/{}/syscall", s_.vm.pid(), tid), 256);
    char* end = nullptr;
    const unsigned long long nr = std::strtoull(call.c_str(), &end, 10);
    if (end != call.c_str()) out.push_back(pseudo(fmt::format("[syscall {}]", syscall_name(nr))));
}

int run_offcpu(Session& s, const CommonOptions& o) {
    s.start(sampler_config(o), describe_event(o));
    OffcpuStacks stacks(s);
    Reporter rep(s, o, mode_of(o.event).kind, {.rows = o.top, .flat = o.flat});
    std::vector<uint32_t> stack;
    uint64_t idle_ns = 0, all_ns = 0;  // for the heading (one report: without --every)
    // The top table alone ranks what is not idle: a quiet VM's threads wait for work nearly all
    // the time, and the locks and calls worth reading would be a fraction of a percent under it.
    // Every other format keeps the idle time, under its own root frames.
    const bool top_only = top_table_only(o);
    auto add = [&](const bb_record& r, uint64_t ns) {
        const bool idle = !stack.empty() && stacks.idle(stack.front());
        all_ns += ns;
        idle_ns += idle ? ns : 0;
        if (!(idle && top_only)) rep.add(r, stack, ns);
    };
    auto st = run_loop(
        s, o,
        [&](const bb_record& r, std::span<const uint32_t> frames) {
            if (!(r.flags & BB_F_OFFCPU)) return;
            stacks.stack(r, frames, stack);
            add(r, r.BB_OFFCPU_NS);
        },
        {}, [&](uint64_t now) { rep.tick(now); });
    // The blocks still open: idle threads that never woke in the run are most of a quiet VM's.
    const uint64_t now = monotonic_ns();
    // The window the blocks were counted over: from the sampler's start (threads blocked then
    // were noted blocked from then) to now.
    st.offcpu_from_ns = s.start_ns;
    st.offcpu_to_ns = now;
    for (const auto& [tid, ns] : s.sampler->take_unrecorded_blocks(now)) {
        bb_record r{};
        r.tid = tid;
        r.tgid = static_cast<uint32_t>(s.vm.pid());
        r.flags = BB_F_OFFCPU;
        r.BB_OFFCPU_NS = ns;
        stacks.unwalked(tid, stack);
        add(r, ns);
        st.offcpu_ns_by_tid[tid] += ns;
    }
    if (o.every == 0)
        rep.set_heading(fmt::format(
            "{:.1f} s blocked across the VM's threads in {:.1f} s: {:.1f} s idle (schedulers with nothing to run, "
            "the poll, aux and other service threads waiting for work), {:.1f} s blocked otherwise (locks, system "
            "calls, sleeping NIFs). {}",
            all_ns / 1e9, st.seconds, idle_ns / 1e9, (all_ns - idle_ns) / 1e9,
            top_only ? "Shares of the time blocked otherwise (the idle time is in the other formats):"
                     : "Shares of all the blocked time:"));
    rep.finish(now);
    return end_run(s, o, st, "blocked system calls");
}

}  // namespace bb
