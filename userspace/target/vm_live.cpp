// The target VM as a live process: its threads and schedulers, its mappings, and the checks
// (and corrections) of struct offsets against what its memory holds.
#include "target/vm.hpp"
#include "target/discovery.hpp"
#include "target/proc_maps.hpp"

#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>

namespace bb {
namespace fs = std::filesystem;

namespace {

// No build's Process is near this (776 bytes on OTP 25): a larger size is a table that lies.
constexpr uint32_t kMaxProcSize = 1 << 16;
constexpr uint64_t kInitPid = 0x3;  // <0.0.0>: pid data 0 under the tag 0011, in every release

// /proc/PID/task/TID/stat, "TID (NAME) S PPID ...": the name between the first "(" and the last
// ")" (it may hold either), the state letter after it, field 9, the kernel's flags, then field
// 22, the start time (a tid given to a new thread is another thread). nullopt if unreadable
// (the thread is gone).
struct TaskStat {
    std::string name;
    char state = 0;
    unsigned flags = 0;
    uint64_t start_time = 0;
};
std::optional<TaskStat> task_stat(const std::string& path) {
    const std::string stat = read_bounded(path, 4096);  // a stat line is well under that
    size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open || close + 2 >= stat.size())
        return std::nullopt;
    TaskStat t;
    t.name = stat.substr(open + 1, close - open - 1);
    t.state = stat[close + 2];
    if (sscanf(stat.c_str() + close + 1, " %*c %*d %*d %*d %*d %*d %u", &t.flags) != 1) t.flags = 0;
    unsigned long long start = 0;
    if (sscanf(stat.c_str() + close + 1,
               " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu", &start) == 1)
        t.start_time = start;
    return t;
}

}  // namespace

bool Vm::alive() const {
    if (kill(pid_, 0) != 0 && errno != EPERM) return false;
    // Killed but not gone yet: exiting (PF_EXITING: its memory going or gone, so reads of it
    // fail) or a zombie not reaped yet. That is the VM's end, not a failure to read it.
    constexpr unsigned kPfExiting = 0x4;
    const auto st = task_stat(fmt::format("/proc/{}/stat", pid_));
    return st && st->state != 'Z' && st->state != 'X' && !(st->flags & kPfExiting);
}

// Processes seen running on a normal scheduler: the scheduler's current_process, read before
// and after the process's own fields, unchanged, and RUNNING(_SYS) by its state. Up to `want`,
// looking for at most ~100 ms (an idle VM has none: then there is nothing to see).
std::vector<Vm::RunningSeen> Vm::running_processes(const VmOffsets& o, size_t want) const {
    std::vector<RunningSeen> seen;
    // The table (an --offsets file, or DWARF) may say anything: sizes in 64 bits, and a Process
    // no larger than any build's (776 bytes on OTP 25, about 1 KiB with lock counting).
    if (o.proc_size > kMaxProcSize || uint64_t{o.proc_state} + 4 > o.proc_size) return seen;
    auto scheds = sched_threads(o);
    for (int round = 0; round < 50 && seen.size() < want; round++) {
        for (const auto& t : scheds) {
            if (t.sched.type != BB_SCHED_NORMAL) continue;
            auto before = mem_.read<uint64_t>(t.sched.esdp + o.esd_current_process);
            if (!before || !*before || (*before & 7)) continue;
            auto proc = mem_.read_bytes(*before, uint64_t{o.proc_size} + 64);
            auto after = mem_.read<uint64_t>(t.sched.esdp + o.esd_current_process);
            if (!proc || after != before) continue;
            uint32_t state;
            std::memcpy(&state, proc->data() + o.proc_state, 4);
            if (state & (BB_PSFLG_RUNNING | BB_PSFLG_RUNNING_SYS)) seen.push_back({t.sched.esdp, std::move(*proc)});
        }
        if (seen.size() >= want) break;
        // A process is current only on a scheduler at work (or blocked in a call made for it,
        // which the round above saw). When every normal scheduler sleeps there is nothing to
        // wait for: an idle VM would cost 50 looks, 100 ms, and the agent attaches VMs in turn.
        bool working = false;
        for (const auto& t : scheds)
            working = working ||
                      (t.sched.type == BB_SCHED_NORMAL &&
                       task_stat(fmt::format("/proc/{}/task/{}/stat", pid_, t.tid)).value_or(TaskStat{}).state == 'R');
        if (!working) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return seen;
}

void Vm::wait_for_boot(const VmOffsets& o) const {
    const uint64_t ptab = symbol_address("erts_proc");
    auto booting = [&] {
        auto tab = mem_.read<uint64_t>(ptab + o.ptab_tab);
        if (!tab) return false;  // unreadable: layout_mismatch() says so
        auto init = *tab ? mem_.read<uint64_t>(*tab) : std::optional<uint64_t>(0);
        return init && *init == 0;
    };
    if (!wait_boot_ && booting()) throw UserError("it is still starting (no init process yet): tried again later");
    using namespace std::chrono;
    const auto start = steady_clock::now();
    bool said = false;
    while (booting() && alive() && steady_clock::now() - start < 10s) {
        if (!said && steady_clock::now() - start > 250ms) {
            fmt::print(stderr, "{}: process {} is still starting (no init process yet): waiting for it, 10 s at most\n",
                       tool_name(), pid_);
            said = true;
        }
        std::this_thread::sleep_for(20ms);
    }
}

std::string Vm::layout_mismatch(const VmOffsets& o) const {
    uint64_t ptab = symbol_address("erts_proc");
    auto tab = mem_.read<uint64_t>(ptab + o.ptab_tab);
    auto max = mem_.read<uint32_t>(ptab + o.ptab_max);
    if (!tab || !max) return "cannot read the process table";
    if (*max < 16 || *max > (1u << 27)) return fmt::format("process table size {} is implausible", *max);
    if (o.proc_size > kMaxProcSize) return fmt::format("Process size {} is implausible", o.proc_size);
    for (uint32_t off : {o.proc_id, o.proc_htop, o.proc_stop, o.proc_heap, o.proc_hend, o.proc_scheduler_data})
        if (off % 8 || uint64_t{off} + 8 > o.proc_size)
            return fmt::format("Process field offset {} is not a word in Process", off);
    if (o.proc_state % 4 || uint64_t{o.proc_state} + 4 > o.proc_size)
        return fmt::format("Process.state offset {} is not a 32-bit field in Process", o.proc_state);

    // Slot 0 is init, <0.0.0>, for the life of the VM.
    auto init = mem_.read<uint64_t>(*tab);
    auto init_id = init ? mem_.read<uint64_t>(*init + o.proc_id) : std::nullopt;
    if (!init_id || *init_id != kInitPid) return "slot 0 of the process table is not <0.0.0>";

    int checked = 0, good = 0;
    for (uint32_t ix = 0; ix < std::min<uint32_t>(*max, 4096) && checked < 64; ix++) {
        auto p = mem_.read<uint64_t>(*tab + 8ull * ix);
        if (!p) return "cannot read the process table";
        if (*p == 0 || (*p & 7) != 0) continue;
        auto id = mem_.read<uint64_t>(*p + o.proc_id);
        auto htop = mem_.read<uint64_t>(*p + o.proc_htop);
        auto stop = mem_.read<uint64_t>(*p + o.proc_stop);
        auto heap = mem_.read<uint64_t>(*p + o.proc_heap);
        auto hend = mem_.read<uint64_t>(*p + o.proc_hend);
        checked++;
        if (id && htop && stop && heap && hend && (*id & 0xf) == 0x3 && *heap < *hend && *heap <= *htop &&
            *htop <= *stop && *stop <= *hend && (*hend - *heap) < (1ull << 40))
            good++;
    }
    // A process in GC is caught mid-move now and then; a wrong offset fails nearly all.
    if (good * 4 < checked * 3)
        return fmt::format("{} of {} processes failed heap <= htop <= stop <= hend and the pid tag check",
                           checked - good, checked);

    // Every normal scheduler thread (by its name) must find its data naming itself.
    int named = 0, normal = 0;
    for (const auto& t : threads()) named += release_->normal.number(t.name) > 0;
    for (const auto& t : sched_threads(o)) normal += t.sched.type == BB_SCHED_NORMAL;
    if (named == 0) return fmt::format("no scheduler threads named as OTP {} names them", release_->major);
    if (normal != named)
        return fmt::format("the data of {} of {} schedulers does not name itself", named - normal, named);

    // A process running on a normal scheduler names that scheduler in its scheduler_data. But
    // erts_schedule() sets the scheduler's current_process (and the process is RUNNING) before
    // it takes the process's lock, and scheduler_data only after: a process read in between
    // has none yet (0), for as long as the lock is contended or the thread is preempted there
    // (all 8 of 8 reads, in 2 of 30 runs against a VM of busy processes on this loaded
    // machine). Those are set aside and looked for again later; a table whose offset reads 0
    // in every running process, again and again, is wrong all the same.
    int agree = 0, disagree = 0, unset = 0;
    for (int pass = 0; pass < 3 && agree + disagree < 4; pass++) {
        int unset_before = unset;
        for (const auto& r : running_processes(o, 8)) {
            uint64_t sd;
            std::memcpy(&sd, r.proc.data() + o.proc_scheduler_data, 8);
            if (sd == 0) unset++;
            else (sd == r.esdp ? agree : disagree)++;
        }
        if (unset == unset_before) break;  // nothing more to learn by looking again
    }
    // A wrong offset makes nearly every one disagree. The right one still races with the VM,
    // so only a clear majority of a few is believed.
    if (disagree >= 4 && agree * 4 < disagree)
        return fmt::format("{} of {} running processes do not name their scheduler in Process.scheduler_data", disagree,
                           agree + disagree);
    if (agree + disagree == 0 && unset >= 12)
        return fmt::format("{} running processes, in 3 looks, had no Process.scheduler_data", unset);
    return "";
}

bool Vm::correct_layout(VmOffsets& o) const {
    bool changed = false;
    // The process table: lock counting and other options grow the lock in its first,
    // cache-line padded part, which moves the read-only part (r.o.tab, then r.o.max at a fixed
    // distance). Find the word that points at a table whose slot 0 is <0.0.0>.
    auto sym = elf_->find("erts_proc");
    uint64_t ptab = symbol_address("erts_proc");
    uint64_t size = sym && sym->size ? std::min<uint64_t>(sym->size, 4096) : 1024;

    if (auto bytes = mem_.read_bytes(ptab, size)) {
        for (uint64_t off = 0; off + 8 <= size; off += 8) {
            uint64_t tab;
            std::memcpy(&tab, bytes->data() + off, 8);
            if (!tab || (tab & 7)) continue;
            auto init = mem_.read<uint64_t>(tab);
            auto id = init && *init && !(*init & 7) ? mem_.read<uint64_t>(*init + o.proc_id) : std::nullopt;
            if (id && *id == kInitPid) {
                // The read-only part moves as one: every field of it by the same distance.
                int64_t d = int64_t(off) - int64_t(o.ptab_tab);
                changed |= d != 0;
                for (uint32_t* f : {&o.ptab_tab, &o.ptab_max, &o.ptab_pix_mask, &o.ptab_pix_cl_mask,
                                    &o.ptab_pix_cl_shift, &o.ptab_pix_cli_mask, &o.ptab_pix_cli_shift})
                    *f = uint32_t(int64_t(*f) + d);
                break;
            }
        }
    }
    // Scheduler data: lock checking (debug builds) puts a lock before the fields read here and
    // moves them together; other options grow the element and so the array's stride. Find the
    // shift at which scheduler 1 names itself (no 1, type normal, current_process 0 or a
    // pointer), then the stride at which the others do.
    uint64_t arr = mem_.read<uint64_t>(symbol_address("erts_aligned_scheduler_data")).value_or(0);
    // How many: erts_no_schedulers, or where it has no symbol (a stripped 29) the scheduler
    // threads by name, one for each.
    uint64_t nsched = 0;
    if (elf_->find("erts_no_schedulers"))
        nsched = mem_.read<uint64_t>(symbol_address("erts_no_schedulers")).value_or(0);
    else
        for (const auto& t : threads()) nsched += release_->normal.number(t.name) > 0;
    auto names_itself = [&](uint64_t esdp, uint64_t no, const VmOffsets& t) {
        auto cur = mem_.read<uint64_t>(esdp + t.esd_current_process);
        return esd_names_itself(esdp, no, BB_SCHED_NORMAL, t) && cur && (*cur & 7) == 0;
    };
    if (arr && !names_itself(arr, 1, o)) {
        for (int64_t d = -64; d <= 256; d += 8) {
            VmOffsets t = o;
            t.esd_no = uint32_t(int64_t(o.esd_no) + d);
            t.esd_type = uint32_t(int64_t(o.esd_type) + d);
            t.esd_current_process = uint32_t(int64_t(o.esd_current_process) + d);
            if (int64_t(o.esd_current_process) + d >= 0 && names_itself(arr, 1, t)) {
                o = t;
                changed = true;
                break;
            }
        }
    }
    // The smallest cache-line multiple at which every scheduler names itself: a larger one can
    // land on a field that happens to hold the right number.
    if (arr && nsched >= 2)
        for (uint64_t stride = 64; stride <= (1u << 20); stride += 64) {
            bool all = true;
            for (uint64_t k = 1; k < std::min<uint64_t>(nsched, 64) && all; k++)
                all = names_itself(arr + k * stride, k + 1, o);
            if (all) {
                changed |= o.aligned_esd_size != stride;
                o.aligned_esd_size = uint32_t(stride);
                break;
            }
        }
    // Last, as it needs the scheduler data right. Process.scheduler_data: lock counting and
    // lock checking grow the lock before it. Where a running process does not name its
    // scheduler there, take the word that does, if the running processes seen agree on one.
    auto running = running_processes(o, 8);
    auto names_sched = [&](uint32_t off) {
        int n = 0;
        for (const auto& r : running) {
            uint64_t sd;
            if (uint64_t{off} + 8 > r.proc.size()) continue;
            std::memcpy(&sd, r.proc.data() + off, 8);
            n += sd == r.esdp;
        }
        return n;
    };
    if (!running.empty() && names_sched(o.proc_scheduler_data) * 2 <= int(running.size())) {
        for (uint32_t off = o.proc_state & ~7u; uint64_t{off} + 8 <= uint64_t{o.proc_size} + 64; off += 8)
            if (names_sched(off) * 2 > int(running.size())) {
                o.proc_scheduler_data = off;
                o.proc_size = std::max(o.proc_size, off + 8);
                changed = true;
                break;
            }
    }

    return changed;
}

std::vector<Mapping> Vm::mapped_files() const {
    std::vector<Mapping> out;
    for (auto& m : read_maps(pid_)) {
        if (m.offset != 0 || m.inode == 0 || !m.path.starts_with("/") || m.path.starts_with("/memfd:")) continue;
        bool dup = false;
        for (const auto& f : out) dup |= f.inode == m.inode && f.dev_major == m.dev_major && f.dev_minor == m.dev_minor;
        if (!dup) out.push_back(std::move(m));
    }
    return out;
}

std::vector<bb_range> Vm::jit_code_ranges() const {
    // The JIT maps its code twice from a memfd (writable and executable views), except with
    // perf support or where that fails: then it uses anonymous rwx memory. A NIF may map
    // anonymous executable memory too (a regex or Lua JIT; or 10,000 pages, in
    // tests/integration/hostile_mem_test.cpp): taken in address order, those left the JIT's own
    // range past the BB_MAX_CODE_RANGES kept, and no Erlang frame was found. So the memfd's
    // views come first, then anonymous rwx memory, then anonymous executable memory.
    std::vector<bb_range> rank[3];
    for (const auto& m : read_maps(pid_)) {
        if (!m.executable()) continue;
        int r = m.path.rfind("/memfd:vmem", 0) == 0 ? 0 : !m.path.empty() ? -1 : m.perms[1] == 'w' ? 1 : 2;
        if (r < 0) continue;
        auto& v = rank[r];
        if (!v.empty() && v.back().end == m.start) v.back().end = m.end;  // adjacent chunks: one range
        else if (v.size() < BB_MAX_CODE_RANGES) v.push_back({m.start, m.end});
    }
    std::vector<bb_range> out;
    for (const auto& v : rank)
        for (const auto& range : v)
            if (out.size() < BB_MAX_CODE_RANGES) out.push_back(range);
    return out;
}

std::string sched_name(uint8_t type, uint16_t no) {
    switch (type) {
    case BB_SCHED_NORMAL: return fmt::format("scheduler {}", no);
    case BB_SCHED_DIRTY_CPU: return fmt::format("dirty cpu scheduler {}", no);
    case BB_SCHED_DIRTY_IO: return fmt::format("dirty io scheduler {}", no);
    default: return "";
    }
}

std::vector<SchedThread> Vm::sched_threads() const { return sched_threads(offsets_); }

std::vector<Vm::Thread> Vm::threads() const {
    std::vector<Thread> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fmt::format("/proc/{}/task", pid_), ec)) {
        Thread t;
        const std::string id = e.path().filename().string();
        if (std::from_chars(id.data(), id.data() + id.size(), t.tid).ec != std::errc() || t.tid <= 0) continue;
        auto st = task_stat(e.path() / "stat");
        if (!st) continue;
        t.name = std::move(st->name);
        t.start_time = st->start_time;
        out.push_back(std::move(t));
    }
    return out;
}

// The scheduler data at esdp says it is scheduler `no` of `type`.
bool Vm::esd_names_itself(uint64_t esdp, uint64_t no, uint8_t type, const VmOffsets& o) const {
    auto n = mem_.read<uint64_t>(esdp + o.esd_no);
    auto t = mem_.read<uint32_t>(esdp + o.esd_type);
    return n && t && *n == no && *t == type;
}

std::vector<SchedThread> Vm::sched_threads(const VmOffsets& o) const {
    struct Kind {
        const ThreadNaming* naming;
        const char* array;
        uint8_t type;
    };
    const std::array kinds{
        Kind{&release_->normal, "erts_aligned_scheduler_data", BB_SCHED_NORMAL},
        Kind{&release_->dirty_cpu, "erts_aligned_dirty_cpu_scheduler_data", BB_SCHED_DIRTY_CPU},
        Kind{&release_->dirty_io, "erts_aligned_dirty_io_scheduler_data", BB_SCHED_DIRTY_IO},
    };
    std::array<uint64_t, kinds.size()> arrays{};
    for (size_t k = 0; k < kinds.size(); k++)
        arrays[k] = mem_.read<uint64_t>(symbol_address(kinds[k].array)).value_or(0);

    std::vector<SchedThread> out;
    for (const auto& [tid, name, start_time] : threads()) {
        for (size_t k = 0; k < kinds.size(); k++) {
            int no = kinds[k].naming->number(name);
            if (!no || !arrays[k]) continue;
            uint64_t esdp = arrays[k] + uint64_t(no - 1) * o.aligned_esd_size;
            // Trust the slot only if it names itself as this scheduler (dirty schedulers keep
            // no = 0 and their number in dirty_no).
            if (!esd_names_itself(esdp, kinds[k].type == BB_SCHED_NORMAL ? uint64_t(no) : 0, kinds[k].type, o))
                continue;
            SchedThread t;
            t.tid = tid;
            t.name = name;
            t.sched.esdp = esdp;
            t.sched.type = kinds[k].type;
            t.sched.no = static_cast<uint16_t>(no);
            uint64_t regs = mem_.read<uint64_t>(esdp + o.esd_registers).value_or(0);
            t.sched.runtime_top = regs ? regs + o.regs_runtime_stack : 0;
            out.push_back(t);
        }
    }
    return out;
}

}  // namespace bb
