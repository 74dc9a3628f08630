#include "sampling/sampler.hpp"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <map>
#include <set>
#include <sys/resource.h>
#include <stdexcept>
#include <utility>

#include "beam_walk.skel.h"
#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/unique_fd.hpp"
#include "target/discovery.hpp"

namespace bb {
namespace {

struct LinkDeleter {
    void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};

}  // namespace

struct Sampler::Impl {
    const Vm& vm;
    std::shared_ptr<Walker> walker;
    bool shared = false;  // the walker samples other VMs too: per-CPU events would sample them as well
    uint32_t slot = 0;
    bool has_slot = false;
    bb_vm slot_value{};  // what the walker has of this VM (rewritten, append only, as it changes)
    // The perf events, each with the walker attached through its own descriptor
    // (PERF_EVENT_IOC_SET_BPF): closing it detaches the program, so each event is one
    // descriptor with one owner. Per thread (keyed by tid, with the thread's start time: a tid
    // the kernel gives to a new thread is a new event) or per CPU.
    struct ThreadEvent {
        uint64_t start_time;
        UniqueFd fd;
    };
    std::map<pid_t, ThreadEvent> thread_events;
    std::vector<UniqueFd> cpu_events;
    std::vector<std::unique_ptr<bpf_link, LinkDeleter>> links;  // entry probes
    std::vector<UniqueFd> session_links;                        // -e alloc's GC entry points, as uprobe sessions
    std::unique_ptr<bpf_link, LinkDeleter> code_link;           // the code-event probe
    std::unique_ptr<AllocWatch> watch;                          // -e alloc's watchpoints
    std::set<uint32_t> sched_tids;                              // this VM's entries of the walker's sched_threads

    bpf_program* on_sample = nullptr;
    SamplerConfig cfg;
    bool per_cpu = false;     // cfg.per_cpu, or the fallback when threads outnumber descriptors
    std::string events_note;  // why per CPU when per thread was asked for ("" otherwise)
    uint64_t last_follow_ns = 0;
    bool attached = false;    // the constructor is done: a change of events is a warning
    uint32_t precise_ip = 3;  // -e cycles: the best the PMU accepted so far
    size_t events_opened = 0;
    bool events_on = true;

    explicit Impl(const Vm& v) : vm(v) {}
    ~Impl() {
        // Events and probes first (members are destroyed after this body): nothing samples the
        // VM once its slot is free.
        thread_events.clear();
        cpu_events.clear();
        links.clear();
        session_links.clear();
        code_link.reset();
        watch.reset();
        if (!walker) return;
        int fd = walker->sched_threads_fd();
        for (uint32_t tid : sched_tids) bpf_map_delete_elem(fd, &tid);
        if (has_slot) walker->remove_vm(slot);
    }
    bb_vm vm_value(const SamplerConfig& cfg) const;
    UniqueFd open_event(pid_t tid, int cpu, bool* out_of_fds = nullptr);
    void follow_threads();
    void follow_blocks();
    void open_cpu_events(const std::string& why);
    size_t events() const { return thread_events.size() + cpu_events.size(); }
    void follow_code_events();
    bool load_unwind_rows();
    std::string code_events_off;
};

// What the walker needs of this VM (struct bb_vm), JIT code and unwind modules left to
// refresh_vm_state().
bb_vm Sampler::Impl::vm_value(const SamplerConfig& cfg) const {
    const VmOffsets& o = vm.offsets();
    bb_vm v{};
    v.tgid = static_cast<uint32_t>(vm.pid());
    v.layout = o.layout();
    // Vm::attach checked that each Process field is a whole word inside Process.
    uint32_t span = 8 + std::max({o.proc_id, o.proc_htop, o.proc_stop, o.proc_heap, o.proc_hend, o.proc_state,
                                  o.proc_scheduler_data, o.proc_reg, o.proc_initial + 16, o.proc_dictionary});
    if (cfg.alloc) span = std::max({span, o.proc_high_water + 8, o.proc_mbuf_sz + 8});
    if (span > 1024) throw UserError(fmt::format("offsets ({}): Process fields beyond 1024 bytes", o.origin));
    v.proc_span = span;
    v.frame_layout = static_cast<uint32_t>(cfg.frame_layout);
    v.jit_descriptor = vm.symbol_address("__jit_debug_descriptor");
    return v;
}

Sampler::Sampler(const Vm& vm, const SamplerConfig& cfg, std::shared_ptr<Walker> walker)
    : impl_(std::make_unique<Impl>(vm)) {
    impl_->cfg = cfg;
    impl_->shared = walker != nullptr;
    if (impl_->shared && cfg.per_cpu) throw UserError("per-CPU events on a walker that samples other VMs");
    impl_->slot_value = impl_->vm_value(cfg);
    impl_->walker = walker ? std::move(walker) : std::make_shared<Walker>(cfg, 1);
    Walker& w = *impl_->walker;
    impl_->slot = w.add_vm(impl_->slot_value);
    impl_->has_slot = true;
    refresh_vm_state();

    impl_->on_sample = w.on_sample();
    auto* s = w.skel();
    // Before the sampling events: no sample runs code loaded unannounced.
    impl_->follow_code_events();
    if (cfg.offcpu) {
        impl_->follow_blocks();
    } else if (cfg.entry_probes.empty()) {
        if (cfg.per_cpu) {
            impl_->open_cpu_events("");
        } else {
            impl_->follow_threads();
            if (impl_->events() == 0) throw UserError(fmt::format("process {} has no threads to sample", vm.pid()));
        }
    } else {
        // With uprobe sessions, one program sees a collection's entry and (when it asks) its
        // return: the entry probe of a function with a return probe is the session's.
        std::set<std::pair<std::string, uint64_t>> with_return;
        for (const auto& p : cfg.entry_probes)
            if (p.gc_return) with_return.emplace(p.binary, p.file_offset);
        for (const auto& p : cfg.entry_probes) {
            bpf_link* l = nullptr;
            if (w.gc_sessions() && p.gc_return) {
                UniqueFd link = w.attach_gc_session(p.binary, p.file_offset, vm.pid());
                if (link) {
                    impl_->session_links.push_back(std::move(link));
                    continue;
                }
            } else if (w.gc_sessions() && !p.heap_alloc && with_return.count({p.binary, p.file_offset})) {
                continue;
            } else {
                l = bpf_program__attach_uprobe(p.gc_return    ? s->progs.on_gc_return
                                               : p.heap_alloc ? w.on_heap_alloc()
                                                              : w.on_call(),
                                               p.gc_return, vm.pid(), p.binary.c_str(), p.file_offset);
            }
            if (!l) {
                int err = errno;
                throw UserError(fmt::format("cannot attach an entry probe to {} at offset {:#x}: {}{}",
                                            p.file ? p.file->name : p.binary, p.file_offset, errno_text(err),
                                            err == EACCES || err == EPERM
                                                ? " (kernels since 2025 want CAP_SYS_ADMIN for uprobes)"
                                                : ""));
            }
            impl_->links.emplace_back(l);
        }
        if (!impl_->session_links.empty())
            impl_->events_note =
                "uprobe sessions (a collection's return is probed only when it can change the "
                "profile)";
    }

    if (cfg.alloc && cfg.alloc_interval) {
        AllocWatch::Config wc;
        wc.interval_words = cfg.alloc_interval;
        wc.in_vm_ok = cfg.watchpoints_in_vm;
        impl_->watch = std::make_unique<AllocWatch>(&s->bss->watch, s->bss->armer_of_cpu,
                                                    std::array{s->maps.watch_ticks_0, s->maps.watch_ticks_1},
                                                    w.fast() ? s->progs.on_watch_fast : s->progs.on_watch, wc);
    }
    impl_->attached = true;
}

// A cpu-clock event on one thread (tid, any CPU) or one CPU (tid -1, all tasks), with the walker
// attached. No descriptor when that thread is gone or that CPU is offline, or (per thread) when
// the descriptors ran out (EMFILE, ENFILE: the caller falls back to per-CPU events); UserError
// on anything else.
UniqueFd Sampler::Impl::open_event(pid_t tid, int cpu, bool* out_of_fds) {
    perf_event_attr attr{};
    attr.size = sizeof(attr);
    if (cfg.cycles) {
        attr.type = PERF_TYPE_HARDWARE;
        attr.config = PERF_COUNT_HW_CPU_CYCLES;
    } else {
        // cpu-clock works everywhere, VMs without a PMU included; its period is in ns.
        attr.type = PERF_TYPE_SOFTWARE;
        attr.config = PERF_COUNT_SW_CPU_CLOCK;
    }
    if (cfg.period_ns) {
        attr.sample_period = cfg.period_ns;
    } else {
        attr.freq = 1;
        attr.sample_freq = cfg.frequency_hz;
    }
    // Cycles: the most precise IP the PMU gives (PEBS, IBS), found as `perf record` finds it,
    // by asking for the best and stepping down while the kernel says no.
    attr.precise_ip = cfg.cycles ? precise_ip : 0;
    int fd;
    for (;;) {
        fd = static_cast<int>(syscall(__NR_perf_event_open, &attr, tid, cpu, -1, PERF_FLAG_FD_CLOEXEC));
        if (fd >= 0 || attr.precise_ip == 0 || (errno != EOPNOTSUPP && errno != EINVAL)) break;
        precise_ip = --attr.precise_ip;
    }
    if (fd < 0 && cfg.cycles && (errno == ENOENT || errno == EOPNOTSUPP))
        throw UserError(
            fmt::format("-e cycles: this machine has no hardware PMU counting CPU cycles "
                        "(perf_event_open: {}; a VM's hypervisor often hides it); use -e cpu-clock",
                        errno_text(errno)));
    if (fd < 0) {
        if ((tid < 0 && errno == ENODEV) || (tid >= 0 && errno == ESRCH)) return UniqueFd();
        if (out_of_fds && (errno == EMFILE || errno == ENFILE)) {
            *out_of_fds = true;
            return UniqueFd();
        }
        throw UserError(fmt::format("perf_event_open on {} {}: {}{}", tid < 0 ? "CPU" : "thread", tid < 0 ? cpu : tid,
                                    errno_text(errno),
                                    errno == EACCES || errno == EPERM ? " (need root or CAP_PERFMON)" : ""));
    }
    UniqueFd owned(fd);
    if (ioctl(fd, PERF_EVENT_IOC_SET_BPF, bpf_program__fd(on_sample)) != 0)
        throw UserError(fmt::format("cannot attach to the perf event of {} {}: {}", tid < 0 ? "CPU" : "thread",
                                    tid < 0 ? cpu : tid, errno_text(errno)));
    events_opened++;
    return owned;
}

// One event per CPU, for all of them at once: the VM's threads are filtered in BPF.
void Sampler::Impl::open_cpu_events(const std::string& why) {
    int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0) throw UserError("cannot count the CPUs");
    thread_events.clear();  // their descriptors make room for these
    for (int cpu = 0; cpu < ncpu; cpu++)
        if (UniqueFd fd = open_event(-1, cpu)) cpu_events.push_back(std::move(fd));  // none: a CPU offline
    if (cpu_events.empty()) throw UserError("no online CPU accepted a perf event");
    per_cpu = true;
    events_note = why;
}

namespace {
// Descriptors kept free for everything but per-thread events: BPF maps and programs, the
// libraries libdwfl keeps open (one per module it read), unwind tables being compiled, output.
constexpr uint64_t kSpareFds = 256;

uint64_t fd_limit() {
    rlimit r{};
    return getrlimit(RLIMIT_NOFILE, &r) == 0 ? r.rlim_cur : 1024;
}
}  // namespace

// Per-thread events, as `perf record -p` opens them: other processes never take an interrupt
// or run the program. Runs at attach and from poll() every half second: a new thread is sampled
// within that, an exited thread's event is closed, and a tid the kernel gave to a new thread
// (another start time) gets a new event. When the VM has more threads than the descriptor
// limit leaves room for (+SDio 700 under the usual 1,024), all of them are sampled through
// per-CPU events instead, and the attach line (or a warning during the run) says so.
void Sampler::Impl::follow_threads() {
    const auto threads = vm.threads();
    std::map<pid_t, ThreadEvent> kept;
    for (const auto& t : threads) {
        auto it = thread_events.find(t.tid);
        if (it != thread_events.end() && it->second.start_time == t.start_time) kept.insert(thread_events.extract(it));
    }
    thread_events.swap(kept);  // the rest (exited threads, reused tids) are closed here
    kept.clear();
    const uint64_t limit = fd_limit();
    bool out_of_fds = threads.size() + kSpareFds > limit;
    for (const auto& t : threads) {
        if (out_of_fds) break;
        if (thread_events.count(t.tid)) continue;
        if (UniqueFd fd = open_event(t.tid, -1, &out_of_fds))  // none: the thread is gone (or no fds)
            thread_events.emplace(t.tid, ThreadEvent{t.start_time, std::move(fd)});
    }
    if (!out_of_fds) return;
    std::string why = fmt::format(
        "per-CPU events: the VM's {} threads need more descriptors than the limit of {} "
        "leaves for per-thread events",
        threads.size(), limit);
    // A shared walker's per-CPU events would run for the threads of every VM it samples: each of
    // them would have its samples twice.
    if (shared)
        throw UserError(
            fmt::format("the VM's {} threads need more descriptors than the limit of {} leaves for "
                        "per-thread events (raise the agent's LimitNOFILE)",
                        threads.size(), limit));
    if (attached) fmt::print(stderr, "{}: warning: sampling now through {}\n", tool_name(), why);
    open_cpu_events(why);
}

// -e offcpu: the scheduler's switches and wakeups and the system calls' returns, for every thread
// of the machine (each program asks first whether the thread is a followed VM's). A VM thread
// blocked now is noted as blocked from now: its time before the attach is not known.
void Sampler::Impl::follow_blocks() {
    if (shared) throw UserError("-e offcpu on a walker that samples other VMs");
    auto* s = walker->skel();
    for (bpf_program* p : {s->progs.on_switch, s->progs.on_wakeup, walker->on_sys_exit()}) {
        links.emplace_back(bpf_program__attach(p));
        if (!links.back())
            throw UserError(fmt::format("-e offcpu: cannot attach to the scheduler's tracepoint {}: {}",
                                        bpf_program__name(p), errno_text(errno)));
    }
    const uint64_t now = monotonic_ns();
    const int fd = bpf_map__fd(s->maps.offcpu_threads);
    for (const auto& t : vm.threads()) {
        // /proc/PID/task/TID/stat: "TID (comm) S ...", the state after the last ')'.
        const std::string stat = read_bounded(fmt::format("/proc/{}/task/{}/stat", vm.pid(), t.tid), 4096);
        const size_t close = stat.rfind(')');
        if (close == std::string::npos || close + 2 >= stat.size()) continue;
        const char state = stat[close + 2];
        if (state != 'S' && state != 'D') continue;
        bb_offcpu_thread blocked{now, 0};
        const uint32_t tid = static_cast<uint32_t>(t.tid);
        bpf_map_update_elem(fd, &tid, &blocked, BPF_NOEXIST);  // a block seen since stays
    }
}

std::vector<std::pair<uint32_t, uint64_t>> Sampler::take_unrecorded_blocks(uint64_t now_ns) {
    std::vector<std::pair<uint32_t, uint64_t>> out;
    if (!impl_->cfg.offcpu) return out;
    const int fd = bpf_map__fd(impl_->walker->skel()->maps.offcpu_threads);
    std::vector<uint32_t> tids;
    uint32_t key = 0, next = 0;
    for (void* prev = nullptr; bpf_map_get_next_key(fd, prev, &next) == 0 && tids.size() < 65536; prev = &key) {
        tids.push_back(next);
        key = next;
    }
    for (uint32_t tid : tids) {
        bb_offcpu_thread t{};
        if (bpf_map_lookup_and_delete_elem(fd, &tid, &t) != 0) continue;
        const uint64_t ns = t.off_ns + (t.since && now_ns > t.since ? now_ns - t.since : 0);
        if (ns) out.emplace_back(tid, ns);
    }
    return out;
}

// The VM calls __jit_debug_register_code() (an empty function, exported for debuggers) each
// time it loads or purges JIT code: an entry probe there gives the symbolizer the exact instant,
// and the moment to read the new module's symbols. Without it (kernels since 2025 want
// CAP_SYS_ADMIN for uprobes) the module list is still re-read, every second and on misses.
void Sampler::Impl::follow_code_events() {
    auto sym = vm.elf().find("__jit_debug_register_code");
    if (!sym) {
        code_events_off = "the VM has no __jit_debug_register_code";
        return;
    }
    // The executable as the Vm opened it (target/target_file.hpp), by its /proc/self/fd path.
    std::string exe = vm.exe_file().fd_path();
    bpf_link* l = bpf_program__attach_uprobe(walker->skel()->progs.on_code_event, false, vm.pid(), exe.c_str(),
                                             sym->file_offset);
    if (!l) {
        int err = errno;
        code_events_off = fmt::format("no entry probe on __jit_debug_register_code: {}{}", errno_text(err),
                                      err == EACCES || err == EPERM ? " (this kernel wants CAP_SYS_ADMIN for uprobes)"
                                                                    : "");
        return;
    }
    code_link.reset(l);
}

// The modules of files mapped since the last call (NIF libraries): refresh() placed their rows
// in the store's maps, so each module's rows are there before the walker can see the module.
// True if there are new ones (the slot is then to be rewritten).
bool Sampler::Impl::load_unwind_rows() {
    NativeUnwind* u = cfg.unwind;
    if (!u) return false;
    u->refresh();
    const auto& mods = u->modules();
    if (mods.size() == slot_value.nr_unwind_modules) return false;
    for (size_t i = slot_value.nr_unwind_modules; i < mods.size() && i < BB_MAX_UNWIND_MODULES; i++)
        slot_value.unwind_modules[i] = mods[i];
    slot_value.nr_unwind_modules = static_cast<uint32_t>(std::min<size_t>(mods.size(), BB_MAX_UNWIND_MODULES));
    return true;
}

Sampler::~Sampler() = default;

void Sampler::refresh_vm_state() {
    Impl& im = *impl_;
    bool changed = im.load_unwind_rows();
    // (on_sample is set once the constructor's first refresh is done: its events come after.)
    if (im.on_sample && im.events_on && !im.per_cpu && im.cfg.perf_events()) {
        im.follow_threads();
        im.last_follow_ns = monotonic_ns();
    }
    auto ranges = im.vm.jit_code_ranges();
    // Append only: the walker may be reading the slot right now.
    for (size_t i = 0; i < ranges.size() && i < BB_MAX_CODE_RANGES; i++) {
        bb_range& r = im.slot_value.code_ranges[i];
        changed |= r.start != ranges[i].start || r.end != ranges[i].end;
        r = {ranges[i].start, ranges[i].end};
    }
    uint32_t nr = static_cast<uint32_t>(std::min<size_t>(ranges.size(), BB_MAX_CODE_RANGES));
    changed |= nr != im.slot_value.nr_code_ranges;
    im.slot_value.nr_code_ranges = nr;
    if (changed) im.walker->update_vm(im.slot, im.slot_value);

    // The scheduler threads, and those gone since (a shared walker's map holds every VM's).
    int map_fd = im.walker->sched_threads_fd();
    std::set<uint32_t> now;
    for (const auto& t : im.vm.sched_threads()) {
        uint32_t tid = static_cast<uint32_t>(t.tid);
        if (int err = bpf_map_update_elem(map_fd, &tid, &t.sched, BPF_ANY))
            throw UserError(
                fmt::format("cannot tell the BPF program about scheduler thread {}: {}", tid, errno_text(err)));
        now.insert(tid);
    }
    for (uint32_t tid : im.sched_tids)
        if (!now.count(tid)) bpf_map_delete_elem(map_fd, &tid);
    im.sched_tids.swap(now);
}

void Sampler::set_dictionary_keys(uint64_t initial_call, uint64_t callers) {
    Impl& im = *impl_;
    if (im.slot_value.dict_key_initial_call == initial_call && im.slot_value.dict_key_callers == callers) return;
    im.slot_value.dict_key_initial_call = initial_call;
    im.slot_value.dict_key_callers = callers;
    im.walker->update_vm(im.slot, im.slot_value);
}

size_t Sampler::poll(std::chrono::milliseconds timeout, const Handler& on_record) {
    // New threads are sampled within half a second of their start (refresh_vm_state() runs
    // about once a second, and does more).
    if (impl_->on_sample && impl_->events_on && !impl_->per_cpu && impl_->cfg.perf_events() &&
        monotonic_ns() - impl_->last_follow_ns >= 500'000'000ull) {
        impl_->follow_threads();
        impl_->last_follow_ns = monotonic_ns();
    }
    return impl_->walker->poll(timeout, on_record, !impl_->events_on);
}

void Sampler::stop_events() {
    // Sampling stops at once on every event; tearing the links down takes longer (about 7 ms
    // each here). The code probe goes last: a sample taken while it was off could run code
    // loaded unannounced. A program run already under way finishes its record, which the next
    // drain reads.
    for (const auto& [tid, e] : impl_->thread_events) ioctl(e.fd.get(), PERF_EVENT_IOC_DISABLE, 0);
    for (const auto& fd : impl_->cpu_events) ioctl(fd.get(), PERF_EVENT_IOC_DISABLE, 0);
    if (impl_->watch) impl_->watch->stop();
    impl_->links.clear();
    impl_->thread_events.clear();
    impl_->cpu_events.clear();
    impl_->code_link.reset();
    impl_->events_on = false;
}

uint32_t Sampler::slot() const { return impl_->slot; }

const std::string& Sampler::events_note() const { return impl_->events_note; }

SamplerCounters Sampler::counters() const {
    const Walker& w = *impl_->walker;
    SamplerCounters out;
    out.bpf = w.counters(impl_->slot);
    out.prog_run_cnt = w.prog_run_cnt();
    out.events = impl_->events_opened;
    out.perf_events = impl_->cfg.perf_events();
    out.walk_hist = w.walk_hist();
    out.handler_errors = w.handler_errors();
    out.first_handler_error = w.first_handler_error();
    out.code_events_off = impl_->code_events_off;
    if (impl_->watch) out.alloc_watch = impl_->watch->counters();
    return out;
}

}  // namespace bb
