#include "run/offcpu.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <utility>

#include <cstdlib>

#include "base/clock.hpp"
#include "target/discovery.hpp"
#include "run/reporter.hpp"
#include "run/run_loop.hpp"

namespace bb {

namespace {
constexpr uint64_t kFutex = 202;
}  // namespace

std::string syscall_name(uint64_t nr) {
    // The calls a VM's threads block in (x86-64 numbers, asm/unistd_64.h).
    static constexpr std::array<std::pair<uint64_t, const char*>, 40> kNames{{
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
    }};
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
    if (role.starts_with("sys_msg_dispatc") || role == "erts_smsg_disp")
        return "[system message dispatcher waiting]";
    if (role == "async" || role == "erts_async") return "[async thread waiting]";
    if (role == "beam.smp" || role == "beamsmp") return "[main thread waiting]";
    return fmt::format("[thread {}]", role.empty() ? "?" : role);
}

uint32_t OffcpuStacks::pseudo(const std::string& name) {
    auto [it, added] = frames_.try_emplace(name, 0);
    if (added) it->second = s_.sym.pseudo_frame(name);
    return it->second;
}

const std::string& OffcpuStacks::thread_name(uint32_t tid) {
    auto it = names_.find(tid);
    if (it != names_.end()) return it->second;
    for (const auto& t : s_.vm.threads()) names_[static_cast<uint32_t>(t.tid)] = t.name;
    return names_[tid];  // "" if gone already
}

void OffcpuStacks::stack(const bb_record& r, std::span<const uint32_t> frames, std::vector<uint32_t>& out) {
    const bool process = r.flags & BB_F_PROC;
    const uint64_t call = r.BB_OFFCPU_SYSCALL;
    out.clear();
    if (r.sched_type != BB_SCHED_NONE && !process) out.push_back(pseudo("[scheduler idle]"));
    else if (r.sched_type == BB_SCHED_NONE) out.push_back(pseudo(thread_wait_frame(thread_name(r.tid))));
    out.insert(out.end(), frames.begin(), frames.end());
    if (process && call == kFutex) out.push_back(pseudo("[lock]"));
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
    Reporter rep(s, o, "offcpu", {.rows = o.top, .flat = o.flat});
    std::vector<uint32_t> stack;
    auto st = run_loop(
        s, o,
        [&](const bb_record& r, std::span<const uint32_t> frames) {
            if (!(r.flags & BB_F_OFFCPU)) return;
            stacks.stack(r, frames, stack);
            rep.add(r, stack, r.BB_OFFCPU_NS);
        },
        {}, [&](uint64_t now) { rep.tick(now); });
    // The blocks still open: idle threads that never woke in the run are most of a quiet VM's.
    const uint64_t now = monotonic_ns();
    for (const auto& [tid, ns] : s.sampler->take_unrecorded_blocks(now)) {
        bb_record r{};
        r.tid = tid;
        r.tgid = static_cast<uint32_t>(s.vm.pid());
        r.flags = BB_F_OFFCPU;
        r.BB_OFFCPU_NS = ns;
        stacks.unwalked(tid, stack);
        rep.add(r, stack, ns);
        st.offcpu_ns_by_tid[tid] += ns;
    }
    rep.finish(now);
    return end_run(s, o, st, "blocked system calls");
}

}  // namespace bb
