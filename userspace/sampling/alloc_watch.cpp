#include "sampling/alloc_watch.hpp"

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <linux/hw_breakpoint.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/realtime.hpp"

namespace bb {
namespace {

// The state is the kernel's __u64 (unsigned long long), not uint64_t (unsigned long): clang
// refuses the pointer conversion the atomics would need.
using State = decltype(bb_watch::state);
State load_state(const bb_watch* w) { return __atomic_load_n(&w->state, __ATOMIC_ACQUIRE); }
void store_state(bb_watch* w, State s) { __atomic_store_n(&w->state, s, __ATOMIC_RELEASE); }
bool cas_state(bb_watch* w, State from, State to) {
    return __atomic_compare_exchange_n(&w->state, &from, to, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

perf_event_attr breakpoint(uint64_t addr, bool disabled) {
    perf_event_attr a{};
    a.size = sizeof(a);
    a.type = PERF_TYPE_BREAKPOINT;
    a.bp_type = HW_BREAKPOINT_W;
    a.bp_len = HW_BREAKPOINT_LEN_8;
    a.bp_addr = addr;
    a.sample_period = 1;
    a.exclude_kernel = 1;  // the kernel writing the VM's memory is not the VM allocating
    a.exclude_hv = 1;
    a.disabled = disabled;
    return a;
}

// Where a watchpoint waits, disabled, between watches: the address must be a user one.
constexpr uint64_t kParkedAddr = 4096;

// The CPU says it runs under a hypervisor (CPUID leaf 1, ECX bit 31: "hypervisor" in the flags).
bool under_hypervisor() {
    std::ifstream f("/proc/cpuinfo");
    for (std::string line; std::getline(f, line);)
        if (line.starts_with("flags")) return (line + " ").find(" hypervisor ") != std::string::npos;
    return false;
}

// The online CPUs, from the kernel's list ("0-3,6").
std::vector<int> online_cpus() {
    std::vector<int> cpus;
    std::ifstream f("/sys/devices/system/cpu/online");
    std::string list;
    std::getline(f, list);
    std::istringstream in(list);
    for (std::string part; std::getline(in, part, ',');) {
        int lo = -1, hi = -1;
        if (std::sscanf(part.c_str(), "%d-%d", &lo, &hi) == 1) hi = lo;
        for (int c = lo; c >= 0 && c <= hi; c++) cpus.push_back(c);
    }
    return cpus;
}

}  // namespace

// One event per CPU rather than per VM thread: a process runs on any scheduler (dirty ones too)
// and senders on any thread write messages into its heap, so per-thread events would need a
// slot on every VM thread and a move would cost one ioctl per thread (14 here) instead of one
// per CPU. Another process writing the same virtual address traps too, and is dropped in BPF.
AllocWatch::AllocWatch(bb_watch* shared, uint8_t* armer_of_cpu, std::array<bpf_map*, 2> ticks, bpf_program* on_watch,
                       const Config& cfg)
    : w_(shared), cfg_(cfg) {
    w_->interval = cfg.interval_words;
    store_state(w_, BB_WATCH_IDLE);
    if (!cfg.in_vm_ok && under_hypervisor())
        throw UserError(
            "-e alloc: this machine is a virtual machine, where a hypervisor can hand a watchpoint's trap to the "
            "kernel without its cause, and the kernel then kills beam.smp with a SIGTRAP (seen on some hosts; see "
            "docs/allocation-profiling.md#virtual-machines): -e alloc-gc uses no watchpoints, and "
            "--watchpoints-in-vm takes the risk");
    const std::vector<int> cpus = online_cpus();
    if (cpus.size() < 2)
        throw UserError(
            "-e alloc needs two CPUs or more: a collection waits for the watchpoint to be armed from "
            "another CPU (-e alloc-gc works on one)");
    // Even-numbered online CPUs to the first thread, odd to the second: each CPU's ticks go to
    // the thread that is not on it.
    for (size_t k = 0; k < cpus.size(); k++) {
        armers_[k % 2].cpus.push_back(cpus[k]);
        if (cpus[k] < BB_WATCH_MAX_CPUS) armer_of_cpu[cpus[k]] = k % 2;
    }
    // Parked (disabled) until the first arm.
    perf_event_attr a = breakpoint(kParkedAddr, true);
    for (int cpu : cpus) {
        UniqueFd fd(static_cast<int>(syscall(__NR_perf_event_open, &a, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC)));
        if (!fd && errno == ENODEV) continue;  // went offline since
        if (!fd)
            throw UserError(fmt::format("-e alloc: cannot open a hardware write watchpoint on CPU {}: {}{}", cpu,
                                        std::strerror(errno),
                                        errno == ENOSPC ? " (its debug registers are all in use: a debugger?)"
                                        : errno == EACCES || errno == EPERM      ? " (need root or CAP_PERFMON)"
                                        : errno == ENOENT || errno == EOPNOTSUPP ? " (no hardware breakpoints here)"
                                                                                 : ""));
        links_.emplace_back(bpf_program__attach_perf_event(on_watch, fd.get()));
        if (!links_.back())
            throw UserError(
                fmt::format("-e alloc: cannot attach to the watchpoint of CPU {}: {}", cpu, std::strerror(errno)));
        ioctl(fd.get(), PERF_EVENT_IOC_DISABLE, 0);  // attaching enabled it
        events_.push_back(std::move(fd));
    }
    for (size_t k = 0; k < armers_.size(); k++) {
        Armer& arm = armers_[k];
        arm.self = this;
        arm.ring.reset(ring_buffer__new(
            bpf_map__fd(ticks[k]),
            [](void* ctx, void* data, size_t size) {
                auto* a = static_cast<Armer*>(ctx);
                if (size >= sizeof(bb_watch_tick)) a->self->on_tick(*a, *static_cast<bb_watch_tick*>(data));
                return 0;
            },
            &arm, nullptr));
        if (!arm.ring) throw UserError(fmt::format("-e alloc: cannot open the watch ring: {}", std::strerror(errno)));
    }
    for (Armer& arm : armers_) arm.thread = std::thread([this, &arm] { run(arm); });
}

AllocWatch::~AllocWatch() { stop(); }

void AllocWatch::stop() {
    if (stopping_.exchange(true)) return;
    for (Armer& a : armers_)
        if (a.thread.joinable()) a.thread.join();
    for (const UniqueFd& fd : events_) ioctl(fd.get(), PERF_EVENT_IOC_DISABLE, 0);
    links_.clear();
    events_.clear();
}

// Sleeps on its ring: a flip wakes it to arm, an end to count it.
void AllocWatch::run(Armer& a) {
    // Real time, so that it is woken at once instead of waiting its turn behind the VM's
    // schedulers; on its own CPUs, never on the one whose collection waits for it. Without the
    // privilege the flips wait longer, and more of them give up (LATE).
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : a.cpus) CPU_SET(c, &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set);
    raise_wakeup_priority();
    while (!stopping_) {
        ring_buffer__poll(a.ring.get(), 20);
        expire_if_old();
    }
}

// Only arm() makes a watch LIVE (through ARMED), under the lock: a LIVE state seen under it is
// the watch armed at armed_ns_.
void AllocWatch::expire_if_old() {
    std::lock_guard<std::mutex> g(move_mu_);
    if (load_state(w_) != BB_WATCH_LIVE || monotonic_ns() - armed_ns_ < BB_WATCH_EXPIRY_NS) return;
    if (!cas_state(w_, BB_WATCH_LIVE, BB_WATCH_IDLE)) return;  // the BPF side ended it first
    expired_++;
    move_to(kParkedAddr, true);
}

void AllocWatch::on_tick(Armer& a, const bb_watch_tick& t) {
    if (t.state == BB_WATCH_ARMING) {
        flips_++;
        if (load_state(w_) == BB_WATCH_ARMING) arm(a);
    } else if (t.outcome) {
        finish(t.outcome);
    }
}

bool AllocWatch::move_to(uint64_t addr, bool park) {
    perf_event_attr a = breakpoint(addr, park);
    for (const UniqueFd& fd : events_)
        if (ioctl(fd.get(), PERF_EVENT_IOC_MODIFY_ATTRIBUTES, &a) != 0) return false;
    return true;
}

// A word drawn uniformly in the epoch's free words; the BPF side lets the process go on once
// every CPU's watchpoint is on it. Not moved (the kernel refused): the BPF side gives up, LATE.
void AllocWatch::arm(Armer& a) {
    uint64_t lo = w_->lo, hi = w_->hi, words = hi > lo ? (hi - lo) / 8 : 0;
    if (!words) return;
    uint64_t addr = lo + 8 * std::uniform_int_distribution<uint64_t>(0, words - 1)(a.rng);
    __atomic_store_n(&w_->addr, addr, __ATOMIC_RELEASE);
    std::lock_guard<std::mutex> g(move_mu_);
    armed_ns_ = monotonic_ns();
    if (move_to(addr, false)) cas_state(w_, BB_WATCH_ARMING, BB_WATCH_ARMED);  // fails if the BPF side gave up
}

// An ended watch's word is written again by the epochs after it (a steady process's young heap
// goes back and forth between two blocks): each write traps, 16-35 us, for nothing. Parked
// unless another flip began meanwhile (the lock orders this against its arm).
void AllocWatch::finish(uint32_t outcome) {
    switch (outcome) {
    case BB_WATCH_SAMPLED: sampled_++; break;
    case BB_WATCH_MISSED: missed_++; break;
    case BB_WATCH_LATE: late_++; break;
    case BB_WATCH_STACK: stack_++; break;
    default: break;
    }
    std::lock_guard<std::mutex> g(move_mu_);
    if (load_state(w_) == BB_WATCH_IDLE) move_to(kParkedAddr, true);
}

AllocWatchCounters AllocWatch::counters() const {
    AllocWatchCounters c;
    c.flips = flips_;
    c.sampled = sampled_;
    c.missed = missed_;
    c.late = late_;
    c.stack = stack_;
    c.expired = expired_;
    return c;
}

}  // namespace bb
