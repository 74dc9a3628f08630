#include "sampling/walker.hpp"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "bb_alloc_watch.h"  // before the skeleton: its .bss holds a struct bb_watch
#include "beam_walk.skel.h"
#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/test_hooks.hpp"
#include "sampling/sampler.hpp"

namespace bb {
namespace {

struct SkelDeleter {
    void operator()(beam_walk* s) const { beam_walk__destroy(s); }
};
struct RingDeleter {
    void operator()(ring_buffer* r) const { ring_buffer__free(r); }
};

int libbpf_quiet(enum libbpf_print_level level, const char* fmt, va_list args) {
    // libbpf's own warnings are noise for an operator; BB_LIBBPF_DEBUG=1 shows them.
    if (level == LIBBPF_DEBUG && !getenv("BB_LIBBPF_DEBUG")) return 0;
    if (!getenv("BB_LIBBPF_DEBUG")) return 0;
    return vfprintf(stderr, fmt, args);
}

// Room for 200 ms of the worst case (every sample at full depth on every CPU), up to 8 MiB:
// the reader drains every 100 ms and is woken at a quarter full, and the ring's pages end up
// resident in the tool (scripts/bench.sh: 32 MiB of a 60 MiB peak before the cap). The same for
// many VMs: CPU-clock samples come only from threads on a CPU, however many VMs there are.
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

// Sums of a per-CPU array of u64, for keys [first, first + n).
std::vector<uint64_t> sum_percpu(int fd, uint32_t first, uint32_t n) {
    int ncpu = libbpf_num_possible_cpus();
    std::vector<uint64_t> vals(ncpu > 0 ? ncpu : 1), sums(n);
    for (uint32_t k = 0; k < n; k++) {
        uint32_t key = first + k;
        if (bpf_map_lookup_elem(fd, &key, vals.data()) == 0)
            for (auto v : vals) sums[k] += v;
    }
    return sums;
}

// BPF_TRACE_UPROBE_SESSION (kernel 6.13): Debian 12's headers and libbpf 1.1 predate it.
constexpr uint32_t kUprobeSession = 57;

// Whether this kernel attaches uprobe sessions: its BTF names the attach type (the kfuncs
// bpf_session_is_return() and bpf_session_cookie() came with it). BB_NO_UPROBE_SESSION=1 takes
// the older pair of probes instead (bench/alloc.py compares the two).
bool kernel_has_uprobe_sessions() {
    static const bool has = [] {
        if (getenv("BB_NO_UPROBE_SESSION")) return false;
        btf* vmlinux = btf__load_vmlinux_btf();
        if (!vmlinux) return false;
        bool found = false;
        int id = btf__find_by_name_kind(vmlinux, "bpf_attach_type", BTF_KIND_ENUM);
        if (const btf_type* t = id > 0 ? btf__type_by_id(vmlinux, id) : nullptr) {
            const struct btf_enum* e = btf_enum(t);
            for (int i = 0; i < btf_vlen(t) && !found; i++)
                found = std::string_view(btf__name_by_offset(vmlinux, e[i].name_off)) == "BPF_TRACE_UPROBE_SESSION" &&
                        uint32_t(e[i].val) == kUprobeSession;
        }
        btf__free(vmlinux);
        return found;
    }();
    return has;
}

}  // namespace

struct Walker::Impl {
    std::unique_ptr<beam_walk, SkelDeleter> skel;
    std::unique_ptr<ring_buffer, RingDeleter> ring;
    bool fast = true;
    bool gc_session = false;          // on_gc_session is loaded (a uprobe session per GC entry point)
    std::vector<uint32_t> slot_tgid;  // 0: free
    const Handler* handler = nullptr;
    size_t handled = 0;
    uint64_t handler_errors = 0;
    std::string first_handler_error;
    // Fault injection for the tests (base/test_hooks.hpp): every Nth record's handler throws.
    uint64_t inject_every = test_hooks::handler_error_every(), delivered = 0;
    bool until_empty = false;
    uint64_t drain_deadline_ns = 0;  // poll(): past it, the drain ends (unless until_empty)
    uint64_t delivered_total = 0;

    int load(const SamplerConfig& cfg, uint32_t slots, bool fast, bool session);

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
        if (!self->until_empty && (self->delivered_total++ & 63) == 63 && monotonic_ns() > self->drain_deadline_ns)
            return -ECANCELED;
        return 0;
    }
};

// Opens the walker with its configuration and loads the program pair for this kernel: the
// may_goto scan (kernel 6.9+, ~4x cheaper per stack word) or the bpf_loop-only one.
int Walker::Impl::load(const SamplerConfig& cfg, uint32_t slots, bool fast_progs, bool session) {
    fast = fast_progs;
    gc_session = session;
    skel.reset(beam_walk__open());
    if (!skel) throw UserError(fmt::format("cannot open the BPF program: {}", errno_text(errno)));
    auto* s = skel.get();
    bool watch = cfg.alloc && cfg.alloc_interval;
    // Only the programs this mode attaches (sampling/sampler.cpp): the verifier takes about half a
    // second for each walking program, most of a tool's time to attach. Perf events sample unless
    // the mode probes functions (SamplerConfig::perf_events()); entry probes take on_call (blame, -e alloc's
    // collections) and on_heap_alloc (erts_heap_alloc). The agent loads its walker with the first
    // VM's configuration, and every VM's has the same probes.
    const bool perf = cfg.perf_events();
    const bool call = std::any_of(cfg.entry_probes.begin(), cfg.entry_probes.end(),
                                  [](const SamplerConfig::Probe& p) { return !p.heap_alloc && !p.gc_return; });
    const bool heap_alloc = std::any_of(cfg.entry_probes.begin(), cfg.entry_probes.end(),
                                        [](const SamplerConfig::Probe& p) { return p.heap_alloc; });
    bpf_program__set_autoload(s->progs.on_sample, perf && !fast);
    bpf_program__set_autoload(s->progs.on_call, call && !fast);
    bpf_program__set_autoload(s->progs.on_sample_fast, perf && fast);
    bpf_program__set_autoload(s->progs.on_call_fast, call && fast);
    bpf_program__set_autoload(s->progs.on_heap_alloc, heap_alloc && !fast);
    bpf_program__set_autoload(s->progs.on_heap_alloc_fast, heap_alloc && fast);
    bpf_program__set_autoload(s->progs.on_gc_return, watch && !session);
    bpf_program__set_autoload(s->progs.on_gc_session, watch && session);
    if (watch && session)
        bpf_program__set_expected_attach_type(s->progs.on_gc_session, static_cast<bpf_attach_type>(kUprobeSession));
    bpf_program__set_autoload(s->progs.on_watch, !fast && watch);
    bpf_program__set_autoload(s->progs.on_watch_fast, fast && watch);
    bpf_program__set_autoload(s->progs.on_switch, cfg.offcpu);
    bpf_program__set_autoload(s->progs.on_wakeup, cfg.offcpu);
    bpf_program__set_autoload(s->progs.on_sys_exit, cfg.offcpu && !fast);
    bpf_program__set_autoload(s->progs.on_sys_exit_fast, cfg.offcpu && fast);
    // BB_LIBBPF_DEBUG=1 also shows the verifier's statistics of each program (its load time);
    // BB_LIBBPF_DEBUG=2 the verifier's log of a program it refuses.
    if (const char* debug = getenv("BB_LIBBPF_DEBUG")) {
        bpf_program* p;
        bpf_object__for_each_program(p, s->obj) bpf_program__set_log_level(p, std::string_view(debug) == "2" ? 1 : 4);
    }

    s->rodata->max_frames = cfg.max_frames;
    if (cfg.blame_ranges.size() > BB_MAX_BLAME_RANGES)
        throw UserError(fmt::format("too many address ranges to watch ({}, at most {})", cfg.blame_ranges.size(),
                                    BB_MAX_BLAME_RANGES));
    s->rodata->nr_blame_ranges = static_cast<uint32_t>(cfg.blame_ranges.size());
    for (size_t i = 0; i < cfg.blame_ranges.size(); i++) {
        s->rodata->blame_ranges[i].start = cfg.blame_ranges[i].start;
        s->rodata->blame_ranges[i].end = cfg.blame_ranges[i].end;
    }
    uint32_t ring_bytes = cfg.ring_bytes ? cfg.ring_bytes : ring_bytes_for(cfg);
    s->rodata->wakeup_bytes = ring_bytes / 4;
    s->rodata->measure_walk = cfg.measure_walk;
    s->rodata->alloc_mode = cfg.alloc;
    s->rodata->watch_mode = watch;
    s->rodata->max_native_frames = cfg.unwind ? std::min<uint32_t>(cfg.max_native_frames, BB_MAX_NATIVE_FRAMES) : 0;
    s->rodata->kernel_stacks = cfg.kernel_stacks;
    s->rodata->offcpu_threshold_ns = cfg.offcpu_threshold_ns;
    if (cfg.only_pid) {
        s->rodata->only_pid = cfg.only_pid->pid & cfg.only_pid->mask;
        s->rodata->only_pid_mask = cfg.only_pid->mask;
    }
    s->rodata->blame_scan_only = getenv("BB_BLAME_SCAN_ONLY") != nullptr;
    bpf_map__set_max_entries(s->maps.records, ring_bytes);
    bpf_map__set_max_entries(s->maps.vms, slots);
    bpf_map__set_max_entries(s->maps.vm_slots, slots);
    bpf_map__set_max_entries(s->maps.counters, BB_C_NR * slots);
    // Every scheduler thread of every VM (a VM has a few dozen, +SDio raises it).
    bpf_map__set_max_entries(s->maps.sched_threads, std::max<uint32_t>(4096, 64 * slots));
    // The rows are the store's (sampling/unwind_maps.hpp), shared with every other walker of
    // this process; without native frames the arrays stay at one entry.
    if (cfg.unwind) {
        if (!cfg.unwind_maps) throw UserError("native frames without the maps of their unwind rows");
        if (bpf_map__reuse_fd(s->maps.unwind_rows, cfg.unwind_maps->rows_fd()) ||
            bpf_map__reuse_fd(s->maps.unwind_buckets, cfg.unwind_maps->buckets_fd()))
            throw UserError(fmt::format("cannot share the native unwind tables' maps: {}", errno_text(errno)));
    }
    // Only -e alloc uses it: preallocated at 64 Ki entries it is 7 MiB of kernel memory per
    // loaded walker (measured with beam-bpf-agent when it loaded one walker per VM).
    if (!cfg.alloc) bpf_map__set_max_entries(s->maps.alloc_seen, 64);
    if (!cfg.alloc_interval) bpf_map__set_max_entries(s->maps.watch_free_at_entry, 64);
    // -e offcpu: an entry per VM thread that ever blocked (a VM has a few dozen; NIFs' and
    // ports' threads add some).
    bpf_map__set_max_entries(s->maps.offcpu_threads, cfg.offcpu ? std::max<uint32_t>(4096, 256 * slots) : 1);
    return beam_walk__load(s);
}

Walker::Walker(const SamplerConfig& cfg, uint32_t slots) : impl_(std::make_unique<Impl>()) {
    libbpf_set_print(libbpf_quiet);
    if (slots == 0) throw UserError("a walker for no VM");
    // BB_BPF_COMPAT=1 forces the program older kernels get, to test it on a new one.
    bool fast = !getenv("BB_BPF_COMPAT");
    // -e alloc's collections are probed by uprobe sessions where the kernel has them, else by
    // an entry and a return probe each (bpf/alloc_watch.bpf.h).
    bool session = cfg.alloc && cfg.alloc_interval && kernel_has_uprobe_sessions();
    int err = impl_->load(cfg, slots, fast, session);
    if (err && session && err != -EPERM) err = impl_->load(cfg, slots, fast, session = false);
    if (err && fast && err != -EPERM) err = impl_->load(cfg, slots, false, session);
    // EFAULT from a load is the verifier failing on its own ("verifier bug" in its log), not a
    // refusal of the program: kernel 6.18.44's refuses beam-bpf-blame's (docs/validation.md).
    if (err)
        throw UserError(fmt::format("cannot load the BPF program into the kernel: {}{}", errno_text(err),
                                    err == -EPERM    ? " (need root, or CAP_BPF and CAP_PERFMON)"
                                    : err == -EFAULT ? " (a bug of this kernel's verifier, not of the program; "
                                                       "BB_LIBBPF_DEBUG=2 shows its log)"
                                                     : ""));
    impl_->slot_tgid.assign(slots, 0);
    impl_->ring.reset(ring_buffer__new(bpf_map__fd(impl_->skel->maps.records), Impl::on_ring, impl_.get(), nullptr));
    if (!impl_->ring) throw UserError(fmt::format("cannot open the ring buffer: {}", errno_text(errno)));
}

Walker::~Walker() = default;

uint32_t Walker::add_vm(const bb_vm& vm) {
    auto& tgids = impl_->slot_tgid;
    auto free = std::find(tgids.begin(), tgids.end(), 0u);
    if (free == tgids.end())
        throw UserError(fmt::format("the walker samples {} VMs already, as many as it has room for", tgids.size()));
    uint32_t slot = static_cast<uint32_t>(free - tgids.begin());
    // A slot's counters are its VM's alone.
    int ncpu = std::max(1, libbpf_num_possible_cpus());
    std::vector<uint64_t> zeros(ncpu);
    int counters_fd = bpf_map__fd(impl_->skel->maps.counters);
    for (uint32_t k = 0; k < BB_C_NR; k++) {
        uint32_t key = slot * BB_C_NR + k;
        bpf_map_update_elem(counters_fd, &key, zeros.data(), BPF_ANY);
    }
    update_vm(slot, vm);
    if (int err = bpf_map_update_elem(bpf_map__fd(impl_->skel->maps.vm_slots), &vm.tgid, &slot, BPF_ANY))
        throw UserError(fmt::format("cannot tell the BPF program about the VM {}: {}", vm.tgid, errno_text(err)));
    *free = vm.tgid;
    return slot;
}

void Walker::update_vm(uint32_t slot, const bb_vm& vm) {
    if (int err = bpf_map_update_elem(bpf_map__fd(impl_->skel->maps.vms), &slot, &vm, BPF_ANY))
        throw UserError(fmt::format("cannot tell the BPF program about the VM {}: {}", vm.tgid, errno_text(err)));
}

void Walker::remove_vm(uint32_t slot) {
    if (slot >= impl_->slot_tgid.size() || !impl_->slot_tgid[slot]) return;
    uint32_t tgid = impl_->slot_tgid[slot];
    bpf_map_delete_elem(bpf_map__fd(impl_->skel->maps.vm_slots), &tgid);
    // A program run that found the slot before the delete sees tgid 0 from here, not this VM.
    static const bb_vm empty{};
    bpf_map_update_elem(bpf_map__fd(impl_->skel->maps.vms), &slot, &empty, BPF_ANY);
    impl_->slot_tgid[slot] = 0;
}

bool Walker::gc_sessions() const { return impl_->gc_session; }

UniqueFd Walker::attach_gc_session(const std::string& binary, uint64_t file_offset, pid_t pid) const {
    // union bpf_attr's link_create with its uprobe_multi part (include/uapi/linux/bpf.h, 6.13),
    // one offset; the kernel takes an attr shorter than its own.
    struct {
        uint32_t prog_fd, target_fd, attach_type, flags;
        uint64_t path, offsets, ref_ctr_offsets, cookies;
        uint32_t cnt, multi_flags, pid, pad;
    } attr{};
    attr.prog_fd = static_cast<uint32_t>(bpf_program__fd(impl_->skel->progs.on_gc_session));
    attr.attach_type = kUprobeSession;
    attr.path = reinterpret_cast<uint64_t>(binary.c_str());
    attr.offsets = reinterpret_cast<uint64_t>(&file_offset);
    attr.cnt = 1;
    attr.pid = static_cast<uint32_t>(pid);
    return UniqueFd(static_cast<int>(syscall(__NR_bpf, BPF_LINK_CREATE, &attr, sizeof(attr))));
}

uint32_t Walker::vms() const {
    return static_cast<uint32_t>(
        std::count_if(impl_->slot_tgid.begin(), impl_->slot_tgid.end(), [](uint32_t t) { return t != 0; }));
}

size_t Walker::poll(std::chrono::milliseconds timeout, const Handler& on_record, bool until_empty) {
    impl_->handler = &on_record;
    impl_->handled = 0;
    impl_->until_empty = until_empty;
    impl_->drain_deadline_ns = monotonic_ns() + (timeout.count() + 100) * 1000000ull;
    int rc = ring_buffer__poll(impl_->ring.get(), static_cast<int>(timeout.count()));
    // The walker rarely wakes us (see emit() in the BPF program): always drain.
    if (rc >= 0 || rc == -EINTR || rc == -ECANCELED) rc = ring_buffer__consume(impl_->ring.get());
    impl_->handler = nullptr;
    if (rc < 0 && rc != -EINTR && rc != -ECANCELED)
        throw UserError(fmt::format("reading the ring buffer: {}", errno_text(rc)));
    return impl_->handled;
}

BpfCounters Walker::counters(uint32_t slot) const {
    BpfCounters out{};
    auto sums = sum_percpu(bpf_map__fd(impl_->skel->maps.counters), slot * BB_C_NR, BB_C_NR);
    std::copy(sums.begin(), sums.end(), out.begin());
    return out;
}

std::vector<uint64_t> Walker::walk_hist() const {
    return sum_percpu(bpf_map__fd(impl_->skel->maps.walk_ns_hist), 0, BB_WALK_HIST_BUCKETS);
}

uint64_t Walker::prog_run_cnt() const {
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    return bpf_obj_get_info_by_fd(bpf_program__fd(on_sample()), &info, &len) == 0 ? info.run_cnt : 0;
}

uint64_t Walker::handler_errors() const { return impl_->handler_errors; }
const std::string& Walker::first_handler_error() const { return impl_->first_handler_error; }
beam_walk* Walker::skel() const { return impl_->skel.get(); }
bool Walker::fast() const { return impl_->fast; }
bpf_program* Walker::on_sample() const { return fast() ? skel()->progs.on_sample_fast : skel()->progs.on_sample; }
bpf_program* Walker::on_call() const { return fast() ? skel()->progs.on_call_fast : skel()->progs.on_call; }
bpf_program* Walker::on_heap_alloc() const {
    return fast() ? skel()->progs.on_heap_alloc_fast : skel()->progs.on_heap_alloc;
}
bpf_program* Walker::on_sys_exit() const { return fast() ? skel()->progs.on_sys_exit_fast : skel()->progs.on_sys_exit; }
int Walker::sched_threads_fd() const { return bpf_map__fd(impl_->skel->maps.sched_threads); }

}  // namespace bb
