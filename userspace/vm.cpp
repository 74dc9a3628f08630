#include "vm.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace bb {
namespace fs = std::filesystem;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
}

struct Mapping {
    uint64_t start = 0, end = 0, offset = 0;
    std::string perms, path;
};

std::vector<Mapping> read_maps(pid_t pid) {
    std::vector<Mapping> maps;
    std::ifstream in(fmt::format("/proc/{}/maps", pid));
    std::string line;
    while (std::getline(in, line)) {
        Mapping m;
        char perms[8] = {};
        int path_at = 0;
        if (sscanf(line.c_str(), "%lx-%lx %7s %lx %*s %*s %n", &m.start, &m.end, perms, &m.offset,
                   &path_at) < 4)
            continue;
        m.perms = perms;
        if (path_at > 0 && static_cast<size_t>(path_at) <= line.size()) m.path = line.substr(path_at);
        maps.push_back(std::move(m));
    }
    return maps;
}

// "12_scheduler" -> 12 when the name after the digits is a prefix of `suffix`: the kernel
// truncates thread names to 15 characters ("10_dirty_io_sch").
int sched_number(const std::string& name, std::string_view suffix) {
    int n = 0;
    auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), n);
    if (ec != std::errc() || n <= 0) return 0;
    std::string_view rest(p, name.data() + name.size() - p);
    if (rest.size() < 4 || suffix.substr(0, rest.size()) != rest) return 0;
    return n;
}

}  // namespace

std::string Vm::format_pid(uint64_t t) {
    // Internal pid: 28 bits of data above the 4-bit tag 0011; 15 bits of number, then serial.
    uint64_t data = (t >> 4) & ((1u << 28) - 1);
    return fmt::format("<0.{}.{}>", data & 0x7fff, data >> 15);
}

Vm Vm::attach(pid_t pid, const std::string& offsets_file) {
    if (pid <= 0) throw UserError(fmt::format("invalid pid {}", pid));
    if (kill(pid, 0) != 0 && errno == ESRCH) throw UserError(fmt::format("no such process: {}", pid));

    Vm vm(pid);
    std::error_code ec;
    vm.exe_ = fs::read_symlink(fmt::format("/proc/{}/exe", pid), ec).string();
    if (ec) {
        if (ec == std::errc::no_such_file_or_directory)
            throw UserError(fmt::format("no such process: {} (or it is a kernel thread)", pid));
        throw UserError(fmt::format("cannot inspect process {}: {} (need root or CAP_SYS_PTRACE)", pid,
                                    ec.message()));
    }
    std::string comm = read_file(fmt::format("/proc/{}/comm", pid));
    while (!comm.empty() && comm.back() == '\n') comm.pop_back();
    std::string base = fs::path(vm.exe_).filename().string();
    if (base.rfind("beam", 0) != 0)
        throw UserError(fmt::format("process {} ({}) is not a BEAM VM: its executable is {}", pid, comm,
                                    vm.exe_));

    try {
        vm.elf_.emplace(fmt::format("/proc/{}/exe", pid));
    } catch (const std::exception& e) {
        throw UserError(fmt::format("cannot read the executable of process {}: {}", pid, e.what()));
    }
    if (!vm.elf_->find("__jit_debug_descriptor") || !vm.elf_->find("erts_aligned_scheduler_data"))
        throw UserError(fmt::format(
            "process {} runs {}, which is not a BEAM JIT build (no __jit_debug_descriptor); "
            "beam-bpf needs the x86-64 JIT of OTP 25",
            pid, vm.exe_));

    for (const auto& m : read_maps(pid)) {
        if (m.offset == 0 && (m.path == vm.exe_ || m.path == vm.exe_ + " (deleted)")) {
            vm.load_bias_ = m.start - vm.elf_->first_load_vaddr();
            break;
        }
    }
    if (vm.load_bias_ == 0)
        throw UserError(fmt::format("cannot find where {} is mapped in process {}", vm.exe_, pid));

    const std::string& build_id = vm.elf_->build_id();
    std::string err;
    std::optional<VmOffsets> off;
    if (!offsets_file.empty()) {
        off = parse_table(read_file(offsets_file), &err);
        if (!off) throw UserError(fmt::format("offset table {}: {}", offsets_file, err));
        if (off->build_id != build_id)
            throw UserError(fmt::format("offset table {} is for build-id {}, but process {} runs build-id {}",
                                        offsets_file, off->build_id, pid, build_id));
        off->origin = "table " + offsets_file;
    } else if (vm.elf_->has_debug_info()) {
        off = offsets_from_dwarf(fmt::format("/proc/{}/exe", pid), &err);
        if (!off) throw UserError(fmt::format("DWARF of {}: {}", vm.exe_, err));
        off->origin = "DWARF of " + vm.exe_;
    } else if ((off = offsets_from_dwarf(fmt::format("/proc/{}/exe", pid), &err))) {
        off->origin = "separate debug info of " + vm.exe_;  // /usr/lib/debug/.build-id
    } else {
        off = builtin_offsets(build_id);
        if (!off)
            throw UserError(fmt::format(
                "unsupported VM build: no offset table for {} (build-id {}); make one with "
                "scripts/make-offsets.sh (or pass --offsets FILE from beam-bpf-offsets)",
                vm.exe_, build_id.empty() ? "none" : build_id));
        off->origin = "built-in table for build-id " + build_id;
    }
    off->build_id = build_id;
    vm.offsets_ = *off;
    vm.check_offsets_live();
    return vm;
}

uint64_t Vm::symbol_address(const std::string& name) const {
    auto s = elf_->find(name);
    if (!s) throw UserError(fmt::format("{} has no symbol {}", exe_, name));
    return s->value + load_bias_;
}

bool Vm::alive() const { return kill(pid_, 0) == 0 || errno == EPERM; }

// The offsets must describe the live VM before any sample is trusted: check the first
// processes of the process table (slot 0 is always init, <0.0.0>).
void Vm::check_offsets_live() const {
    const VmOffsets& o = offsets_;
    auto fail = [&](const std::string& why) {
        throw UserError(fmt::format("offsets ({}) do not match process {}: {}; refusing to report garbage",
                                    o.origin, pid_, why));
    };
    uint64_t ptab = symbol_address("erts_proc");
    auto tab = mem_.read<uint64_t>(ptab + o.ptab_tab);
    auto max = mem_.read<uint32_t>(ptab + o.ptab_max);
    if (!tab || !max) fail("cannot read the process table");
    if (*max == 0 || *max > (1u << 27)) fail(fmt::format("process table size {} is implausible", *max));

    int checked = 0, good = 0;
    for (uint32_t ix = 0; ix < std::min<uint32_t>(*max, 256) && checked < 16; ix++) {
        auto p = mem_.read<uint64_t>(*tab + 8ull * ix);
        if (!p) fail("cannot read the process table");
        if (*p == 0 || (*p & 7) != 0) continue;
        auto id = mem_.read<uint64_t>(*p + o.proc_id);
        auto htop = mem_.read<uint64_t>(*p + o.proc_htop);
        auto stop = mem_.read<uint64_t>(*p + o.proc_stop);
        auto heap = mem_.read<uint64_t>(*p + o.proc_heap);
        auto hend = mem_.read<uint64_t>(*p + o.proc_hend);
        checked++;
        if (id && htop && stop && heap && hend && (*id & 0xf) == 0x3 && *heap <= *htop &&
            *htop <= *stop && *stop <= *hend)
            good++;
    }
    if (checked == 0) fail("no process found in the process table");
    if (good * 2 <= checked)
        fail(fmt::format("{} of {} processes failed heap <= htop <= stop <= hend and the pid tag check",
                         checked - good, checked));

    // Scheduler data must say who it is: its number and type at the offsets we have.
    auto scheds = sched_threads();
    if (scheds.empty()) fail("no scheduler threads found (thread names N_scheduler)");
}

std::vector<Vm::MappedFile> Vm::mapped_files() const {
    std::vector<MappedFile> out;
    for (const auto& m : read_maps(pid_)) {
        if (m.offset != 0 || m.path.empty() || m.path[0] != '/' || m.path.rfind("/memfd:", 0) == 0) continue;
        bool dup = false;
        for (const auto& f : out) dup |= f.path == m.path;
        if (!dup) out.push_back({m.path, m.start});
    }
    return out;
}

std::vector<bb_range> Vm::jit_code_ranges() const {
    // The JIT maps its code twice from a memfd (writable and executable views), except with
    // perf support or where that fails: then it uses anonymous rwx memory. Nothing else in a
    // BEAM maps anonymous executable memory.
    std::vector<bb_range> r;
    for (const auto& m : read_maps(pid_)) {
        bool exec = m.perms.size() >= 3 && m.perms[2] == 'x';
        bool jit = m.path.rfind("/memfd:vmem", 0) == 0 || m.path.empty();
        if (!exec || !jit) continue;
        if (!r.empty() && r.back().end == m.start)
            r.back().end = m.end;  // adjacent chunks: one range
        else if (r.size() < BB_MAX_CODE_RANGES)
            r.push_back({m.start, m.end});
    }
    return r;
}

std::vector<SchedThread> Vm::sched_threads() const {
    struct Kind {
        std::string_view suffix;
        const char* array;
        uint8_t type;
    };
    static constexpr std::array kinds{
        Kind{"_scheduler", "erts_aligned_scheduler_data", BB_SCHED_NORMAL},
        Kind{"_dirty_cpu_scheduler", "erts_aligned_dirty_cpu_scheduler_data", BB_SCHED_DIRTY_CPU},
        Kind{"_dirty_io_scheduler", "erts_aligned_dirty_io_scheduler_data", BB_SCHED_DIRTY_IO},
    };
    std::array<uint64_t, kinds.size()> arrays{};
    for (size_t k = 0; k < kinds.size(); k++)
        arrays[k] = mem_.read<uint64_t>(symbol_address(kinds[k].array)).value_or(0);

    std::vector<SchedThread> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(fmt::format("/proc/{}/task", pid_), ec)) {
        SchedThread t;
        t.name = read_file(e.path() / "comm");
        while (!t.name.empty() && t.name.back() == '\n') t.name.pop_back();
        for (size_t k = 0; k < kinds.size(); k++) {
            int no = sched_number(t.name, kinds[k].suffix);
            if (!no || !arrays[k]) continue;
            uint64_t esdp = arrays[k] + uint64_t(no - 1) * offsets_.aligned_esd_size;
            // Trust the slot only if it names itself as this scheduler (dirty schedulers keep
            // no = 0 and their number in dirty_no).
            uint64_t want_no = kinds[k].type == BB_SCHED_NORMAL ? uint64_t(no) : 0;
            auto esd_no = mem_.read<uint64_t>(esdp + offsets_.esd_no);
            auto esd_type = mem_.read<uint32_t>(esdp + offsets_.esd_type);
            if (!esd_no || !esd_type || *esd_no != want_no || *esd_type != kinds[k].type) continue;
            t.tid = std::stoi(e.path().filename().string());
            t.sched.esdp = esdp;
            t.sched.type = kinds[k].type;
            t.sched.no = static_cast<uint16_t>(no);
            uint64_t regs = mem_.read<uint64_t>(esdp + offsets_.esd_registers).value_or(0);
            t.sched.runtime_top = regs ? regs + offsets_.regs_runtime_stack : 0;
            out.push_back(t);
        }
    }
    return out;
}

}  // namespace bb
