#include "run/offcpu.hpp"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <utility>

#include "base/clock.hpp"
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
    if (role == "poller") return "[poll thread waiting]";
    if (role == "aux") return "[aux thread waiting]";
    if (role.starts_with("sys_sig_dispatc")) return "[signal dispatcher waiting]";
    if (role.starts_with("sys_msg_dispatc")) return "[system message dispatcher waiting]";
    if (role == "async") return "[async thread waiting]";
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
    rep.finish(monotonic_ns());
    return end_run(s, o, st, "blocked system calls");
}

}  // namespace bb
