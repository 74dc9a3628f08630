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
#include <sys/resource.h>
#include <stdexcept>
#include <utility>

#include "beam_walk.skel.h"
#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/test_hooks.hpp"
#include "base/unique_fd.hpp"

namespace bb {
namespace {

struct SkelDeleter {
    void operator()(beam_walk* s) const { beam_walk__destroy(s); }
};
struct LinkDeleter {
    void operator()(bpf_link* l) const { bpf_link__destroy(l); }
};
struct RingDeleter {
    void operator()(ring_buffer* r) const { ring_buffer__free(r); }
};


std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }


int libbpf_quiet(enum libbpf_print_level level, const char* fmt, va_list args) {
    // libbpf's own warnings are noise for an operator; BB_LIBBPF_DEBUG=1 shows them.
    if (level == LIBBPF_DEBUG && !getenv("BB_LIBBPF_DEBUG")) return 0;
    if (!getenv("BB_LIBBPF_DEBUG")) return 0;
    return vfprintf(stderr, fmt, args);
}

// Room for 200 ms of the worst case (every sample at full depth on every CPU), up to 8 MiB:
// the reader drains every 100 ms and is woken at a quarter full, and the ring's pages end up
// resident in the tool (scripts/bench.sh: 32 MiB of a 60 MiB peak before the cap).
uint32_t ring_bytes_for(const SamplerConfig& cfg) {
    // Entry probes fire as often as the VM calls the function: a busy VM collects garbage tens
    // of thousands of times a second.
    if (!cfg.entry_probes.empty()) return 32u << 20;
    uint64_t rate = cfg.period_ns ? 1000000000ull / cfg.period_ns : cfg.frequency_hz;
    uint64_t cpus = std::max(1, libbpf_num_possible_cpus());
    uint64_t want = rate * cpus * bb_record_size(cfg.max_frames) / 5;
    uint64_t bytes = 1u << 20;
    while (bytes < want && bytes < (8u << 20)) bytes <<= 1;
    return static_cast<uint32_t>(bytes);
}

}  // namespace

struct Sampler::Impl {
    const Vm& vm;
    std::unique_ptr<beam_walk, SkelDeleter> skel;
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
    std::unique_ptr<ring_buffer, RingDeleter> ring;
    std::unique_ptr<bpf_link, LinkDeleter> code_link;  // the code-event probe
    std::unique_ptr<AllocWatch> watch;                  // -e alloc's watchpoints
    const Handler* handler = nullptr;
    size_t handled = 0;
    uint64_t handler_errors = 0;
    std::string first_handler_error;

    bpf_program* on_sample = nullptr;
    SamplerConfig cfg;
    bool per_cpu = false;          // cfg.per_cpu, or the fallback when threads outnumber descriptors
    std::string events_note;       // why per CPU when per thread was asked for ("" otherwise)
    uint64_t last_follow_ns = 0;
    bool attached = false;         // the constructor is done: a change of events is a warning
    uint32_t precise_ip = 3;       // -e cycles: the best the PMU accepted so far
    // Fault injection for the tests (base/test_hooks.hpp): every Nth record's handler throws.
    uint64_t inject_every = test_hooks::handler_error_every(), delivered = 0;
    size_t events_opened = 0;
    bool events_on = true;
    uint64_t drain_deadline_ns = 0;  // poll(): past it, the drain ends (events_on only)
    uint64_t delivered_total = 0;

    explicit Impl(const Vm& v) : vm(v) {}
    int load(const SamplerConfig& cfg, bool fast);
    UniqueFd open_event(pid_t tid, int cpu, bool* out_of_fds = nullptr);
    void follow_threads();
    void open_cpu_events(const std::string& why);
    size_t events() const { return thread_events.size() + cpu_events.size(); }
    void follow_code_events();
    void load_unwind_rows();
    std::string code_events_off;
    size_t unwind_modules_loaded = 0;

    static int on_ring(void* ctx, void* data, size_t size) {
        auto* self = static_cast<Impl*>(ctx);
        if (size < bb_record_size(0)) return 0;
        // The ring carries a record trimmed after frames[nframes - 1]: handlers read no further.
        const auto* rec = static_cast<const bb_record*>(data);
        if (rec->nframes > BB_MAX_FRAMES || size < bb_record_size(rec->nframes)) return 0;
        // Nothing may unwind through libbpf's C frames: a record the handler cannot take is
        // counted and the drain goes on, so what was collected so far is never lost.
        try {
            if (self->inject_every && rec->where != BB_WHERE_CODE_EVENT && ++self->delivered % self->inject_every == 0)
                throw std::runtime_error("injected fault (BB_INJECT_HANDLER_ERROR)");
            (*self->handler)(*rec);
            self->handled++;
        } catch (const std::exception& e) {
            if (self->handler_errors++ == 0) self->first_handler_error = e.what();
        } catch (...) {
            if (self->handler_errors++ == 0) self->first_handler_error = "unknown error";
        }
        // A negative return makes libbpf end the drain (this record is consumed). One clock
        // read per 64 records costs nothing next to symbolizing them.
        if (self->events_on && (self->delivered_total++ & 63) == 63 && monotonic_ns() > self->drain_deadline_ns)
            return -ECANCELED;
        return 0;
    }
};

// Opens the walker with its configuration and loads the program pair for this kernel: the
// may_goto scan (kernel 6.9+, ~4x cheaper per stack word) or the bpf_loop-only one.
int Sampler::Impl::load(const SamplerConfig& cfg, bool fast) {
    const VmOffsets& o = vm.offsets();
    skel.reset(beam_walk__open());
    if (!skel) throw UserError(fmt::format("cannot open the BPF program: {}", errno_text(errno)));
    auto* s = skel.get();
    bpf_program__set_autoload(s->progs.on_sample, !fast);
    bpf_program__set_autoload(s->progs.on_call, !fast);
    bpf_program__set_autoload(s->progs.on_sample_fast, fast);
    bpf_program__set_autoload(s->progs.on_call_fast, fast);
    bpf_program__set_autoload(s->progs.on_heap_alloc, !fast);
    bpf_program__set_autoload(s->progs.on_heap_alloc_fast, fast);
    bpf_program__set_autoload(s->progs.on_gc_return, cfg.alloc && cfg.alloc_interval);
    bpf_program__set_autoload(s->progs.on_watch, !fast && cfg.alloc && cfg.alloc_interval);
    bpf_program__set_autoload(s->progs.on_watch_fast, fast && cfg.alloc && cfg.alloc_interval);
    // BB_LIBBPF_DEBUG=1 also shows the verifier's statistics of each program (its load time).
    if (getenv("BB_LIBBPF_DEBUG")) {
        bpf_program* p;
        bpf_object__for_each_program(p, s->obj) bpf_program__set_log_level(p, 4);
    }

    s->rodata->target_tgid = static_cast<uint32_t>(vm.pid());
    s->rodata->max_frames = cfg.max_frames;
    s->rodata->vm = o.layout();
    // Vm::attach checked that each Process field is a whole word inside Process.
    uint32_t span = 8 + std::max({o.proc_id, o.proc_htop, o.proc_stop, o.proc_heap, o.proc_hend, o.proc_state,
                                  o.proc_scheduler_data, o.proc_reg, o.proc_initial + 16});
    if (cfg.alloc) span = std::max({span, o.proc_high_water + 8, o.proc_mbuf_sz + 8});
    if (span > 1024) throw UserError(fmt::format("offsets ({}): Process fields beyond 1024 bytes", o.origin));
    s->rodata->proc_span = span;
    if (cfg.blame_ranges.size() > BB_MAX_BLAME_RANGES)
        throw UserError(fmt::format("too many address ranges to watch ({}, at most {})",
                                    cfg.blame_ranges.size(), BB_MAX_BLAME_RANGES));
    s->rodata->nr_blame_ranges = static_cast<uint32_t>(cfg.blame_ranges.size());
    for (size_t i = 0; i < cfg.blame_ranges.size(); i++) {
        s->rodata->blame_ranges[i].start = cfg.blame_ranges[i].start;
        s->rodata->blame_ranges[i].end = cfg.blame_ranges[i].end;
    }
    uint32_t ring_bytes = cfg.ring_bytes ? cfg.ring_bytes : ring_bytes_for(cfg);
    s->rodata->wakeup_bytes = ring_bytes / 4;
    s->rodata->measure_walk = cfg.measure_walk;
    s->rodata->alloc_mode = cfg.alloc;
    s->rodata->watch_mode = cfg.alloc && cfg.alloc_interval;
    s->rodata->frame_layout = static_cast<uint32_t>(cfg.frame_layout);
    s->rodata->jit_descriptor = vm.symbol_address("__jit_debug_descriptor");
    s->rodata->max_native_frames = cfg.unwind ? std::min<uint32_t>(cfg.max_native_frames, BB_MAX_NATIVE_FRAMES) : 0;
    s->rodata->kernel_stacks = cfg.kernel_stacks;
    if (cfg.only_pid) {
        s->rodata->only_pid = cfg.only_pid->pid & cfg.only_pid->mask;
        s->rodata->only_pid_mask = cfg.only_pid->mask;
    }
    s->rodata->blame_scan_only = getenv("BB_BLAME_SCAN_ONLY") != nullptr;
    bpf_map__set_max_entries(s->maps.records, ring_bytes);
    // The rows are the store's (sampling/unwind_maps.hpp), shared with every other walker of
    // this process; without native frames the arrays stay at one entry.
    if (cfg.unwind) {
        if (!cfg.unwind_maps) throw UserError("native frames without the maps of their unwind rows");
        if (bpf_map__reuse_fd(s->maps.unwind_rows, cfg.unwind_maps->rows_fd()) ||
            bpf_map__reuse_fd(s->maps.unwind_buckets, cfg.unwind_maps->buckets_fd()))
            throw UserError(fmt::format("cannot share the native unwind tables' maps: {}", errno_text(errno)));
    }
    // Only -e alloc uses it: preallocated at 64 Ki entries it is 7 MiB of kernel memory per
    // loaded walker (measured with beam-bpf-agent, one walker per VM).
    if (!cfg.alloc) bpf_map__set_max_entries(s->maps.alloc_seen, 64);
    if (!cfg.alloc_interval) bpf_map__set_max_entries(s->maps.watch_free_at_entry, 64);
    return beam_walk__load(s);
}

Sampler::Sampler(const Vm& vm, const SamplerConfig& cfg) : impl_(std::make_unique<Impl>(vm)) {
    libbpf_set_print(libbpf_quiet);
    // BB_BPF_COMPAT=1 forces the program older kernels get, to test it on a new one.
    bool fast = !getenv("BB_BPF_COMPAT");
    int err = impl_->load(cfg, fast);
    if (err && fast && err != -EPERM) {
        fast = false;
        err = impl_->load(cfg, fast);
    }
    if (err)
        throw UserError(fmt::format("cannot load the BPF program into the kernel: {}{}", errno_text(err),
                                    err == -EPERM ? " (need root, or CAP_BPF and CAP_PERFMON)" : ""));
    auto* s = impl_->skel.get();
    bpf_program* on_sample = fast ? s->progs.on_sample_fast : s->progs.on_sample;
    bpf_program* on_call = fast ? s->progs.on_call_fast : s->progs.on_call;
    bpf_program* on_heap_alloc = fast ? s->progs.on_heap_alloc_fast : s->progs.on_heap_alloc;
    impl_->cfg = cfg;
    refresh_vm_state();

    impl_->on_sample = on_sample;
    // Before the sampling events: no sample runs code loaded unannounced.
    impl_->follow_code_events();
    if (cfg.entry_probes.empty()) {
        if (cfg.per_cpu) {
            impl_->open_cpu_events("");
        } else {
            impl_->follow_threads();
            if (impl_->events() == 0) throw UserError(fmt::format("process {} has no threads to sample", vm.pid()));
        }
    } else {
        for (const auto& p : cfg.entry_probes) {
            bpf_link* l = bpf_program__attach_uprobe(p.gc_return    ? s->progs.on_gc_return
                                                     : p.heap_alloc ? on_heap_alloc
                                                                    : on_call,
                                                     p.gc_return, vm.pid(), p.binary.c_str(), p.file_offset);
            if (!l) {
                int err = errno;
                throw UserError(fmt::format("cannot attach an entry probe to {} at offset {:#x}: {}{}", p.file ? p.file->name : p.binary,
                                            p.file_offset, errno_text(err),
                                            err == EACCES || err == EPERM
                                                ? " (kernels since 2025 want CAP_SYS_ADMIN for uprobes)"
                                                : ""));
            }
            impl_->links.emplace_back(l);
        }
    }

    if (cfg.alloc && cfg.alloc_interval) {
        AllocWatch::Config wc;
        wc.interval_words = cfg.alloc_interval;
        impl_->watch = std::make_unique<AllocWatch>(&s->bss->watch, s->bss->armer_of_cpu,
                                                    std::array{s->maps.watch_ticks_0, s->maps.watch_ticks_1},
                                                    fast ? s->progs.on_watch_fast : s->progs.on_watch, wc);
    }
    impl_->ring.reset(ring_buffer__new(bpf_map__fd(s->maps.records), Impl::on_ring, impl_.get(), nullptr));
    if (!impl_->ring) throw UserError(fmt::format("cannot open the ring buffer: {}", errno_text(errno)));
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
        throw UserError(fmt::format("-e cycles: this machine has no hardware PMU counting CPU cycles "
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
        if (it != thread_events.end() && it->second.start_time == t.start_time)
            kept.insert(thread_events.extract(it));
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
    std::string why = fmt::format("per-CPU events: the VM's {} threads need more descriptors than the limit of {} "
                                  "leaves for per-thread events",
                                  threads.size(), limit);
    if (attached) fmt::print(stderr, "{}: warning: sampling now through {}\n", tool_name(), why);
    open_cpu_events(why);
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
    bpf_link* l = bpf_program__attach_uprobe(skel->progs.on_code_event, false, vm.pid(), exe.c_str(), sym->file_offset);
    if (!l) {
        int err = errno;
        code_events_off = fmt::format("no entry probe on __jit_debug_register_code: {}{}", errno_text(err),
                                      err == EACCES || err == EPERM ? " (this kernel wants CAP_SYS_ADMIN for uprobes)" : "");
        return;
    }
    code_link.reset(l);
}

// The modules of files mapped since the last call (NIF libraries): refresh() placed their rows
// in the store's maps, so each module's rows are there before the walker can see the module.
void Sampler::Impl::load_unwind_rows() {
    NativeUnwind* u = cfg.unwind;
    if (!u) return;
    u->refresh();
    const auto& mods = u->modules();
    if (mods.size() == unwind_modules_loaded) return;
    for (size_t i = unwind_modules_loaded; i < mods.size(); i++) skel->bss->unwind_modules[i] = mods[i];
    __atomic_store_n(&skel->bss->nr_unwind_modules, static_cast<uint32_t>(mods.size()), __ATOMIC_RELEASE);
    unwind_modules_loaded = mods.size();
}

Sampler::~Sampler() = default;

void Sampler::refresh_vm_state() {
    auto* s = impl_->skel.get();
    impl_->load_unwind_rows();
    if (impl_->on_sample && impl_->events_on && !impl_->per_cpu && impl_->cfg.entry_probes.empty()) {
        impl_->follow_threads();
        impl_->last_follow_ns = monotonic_ns();
    }
    auto ranges = impl_->vm.jit_code_ranges();
    // Append only: the walker may be reading these right now.
    for (size_t i = 0; i < ranges.size(); i++) {
        s->bss->code_ranges[i].start = ranges[i].start;
        s->bss->code_ranges[i].end = ranges[i].end;
    }
    __atomic_store_n(&s->bss->nr_code_ranges, static_cast<uint32_t>(ranges.size()), __ATOMIC_RELEASE);

    int map_fd = bpf_map__fd(s->maps.sched_threads);
    for (const auto& t : impl_->vm.sched_threads()) {
        uint32_t tid = static_cast<uint32_t>(t.tid);
        if (int err = bpf_map_update_elem(map_fd, &tid, &t.sched, BPF_ANY))
            throw UserError(fmt::format("cannot tell the BPF program about scheduler thread {}: {}", tid,
                                        errno_text(err)));
    }
}

size_t Sampler::poll(std::chrono::milliseconds timeout, const Handler& on_record) {
    // New threads are sampled within half a second of their start (refresh_vm_state() runs
    // about once a second, and does more).
    if (impl_->on_sample && impl_->events_on && !impl_->per_cpu && impl_->cfg.entry_probes.empty() &&
        monotonic_ns() - impl_->last_follow_ns >= 500'000'000ull) {
        impl_->follow_threads();
        impl_->last_follow_ns = monotonic_ns();
    }
    impl_->handler = &on_record;
    impl_->handled = 0;
    impl_->drain_deadline_ns = monotonic_ns() + (timeout.count() + 100) * 1000000ull;
    int rc = ring_buffer__poll(impl_->ring.get(), static_cast<int>(timeout.count()));
    // The walker rarely wakes us (see emit() in the BPF program): always drain.
    if (rc >= 0 || rc == -EINTR || rc == -ECANCELED) rc = ring_buffer__consume(impl_->ring.get());
    impl_->handler = nullptr;
    if (rc < 0 && rc != -EINTR && rc != -ECANCELED)
        throw UserError(fmt::format("reading the ring buffer: {}", errno_text(rc)));
    return impl_->handled;
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

namespace {
// Sums of a per-CPU array of u64, one per key.
std::vector<uint64_t> sum_percpu(int fd, uint32_t keys) {
    int ncpu = libbpf_num_possible_cpus();
    std::vector<uint64_t> vals(ncpu > 0 ? ncpu : 1), sums(keys);
    for (uint32_t k = 0; k < keys; k++)
        if (bpf_map_lookup_elem(fd, &k, vals.data()) == 0)
            for (auto v : vals) sums[k] += v;
    return sums;
}
}  // namespace

const std::string& Sampler::events_note() const { return impl_->events_note; }

SamplerCounters Sampler::counters() const {
    auto c = sum_percpu(bpf_map__fd(impl_->skel->maps.counters), BB_C_NR);
    SamplerCounters out{c[BB_C_SEEN], c[BB_C_EMITTED], c[BB_C_DROPPED], c[BB_C_FILTERED], 0, impl_->events_opened,
                        c[BB_C_WALK_NS], 0, {}, impl_->handler_errors, impl_->first_handler_error, 0, 0, {}, {}, {}};
    if (impl_->on_sample) {
        bpf_prog_info info{};
        uint32_t len = sizeof(info);
        if (bpf_obj_get_info_by_fd(bpf_program__fd(impl_->on_sample), &info, &len) == 0) out.prog_run_cnt = info.run_cnt;
    }
    out.walk_hist = sum_percpu(bpf_map__fd(impl_->skel->maps.walk_ns_hist), BB_WALK_HIST_BUCKETS);
    out.code_events = c[BB_C_CODE_EVENTS];
    out.native_walk_ns = c[BB_C_NATIVE_NS];
    out.code_events_lost = c[BB_C_CODE_EVENTS_LOST];
    out.code_events_off = impl_->code_events_off;
    out.unreadable = {c[BB_C_BAD_READ], c[BB_C_BAD_STATE], c[BB_C_BAD_PID], c[BB_C_BAD_HEAP], c[BB_C_BAD_STACK],
                      c[BB_C_IN_GC],   c[BB_C_EXITING]};
    if (impl_->watch) {
        out.alloc_watch = impl_->watch->counters();
        out.alloc_watch->hits = c[BB_C_WATCH_HITS];
        out.alloc_watch->ignored = c[BB_C_WATCH_IGNORED];
        out.alloc_watch->wait_ns = c[BB_C_WATCH_WAIT_NS];
        out.alloc_watch->busy = c[BB_C_WATCH_BUSY];
    }
    return out;
}

}  // namespace bb
