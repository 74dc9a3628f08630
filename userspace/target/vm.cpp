// The target VM's identity: what its executable is (build-id, release, flavor, architecture),
// where its symbols come from, and the offsets chosen for it. The checks of those offsets
// against the live process are in vm_live.cpp.
#include "target/vm.hpp"
#include "target/proc_maps.hpp"
#include "target/target_file.hpp"
#include "target/debug_file.hpp"
#include "target/offsets_dwarf.hpp"
#include "base/closest.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <elf.h>

#include <cerrno>
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

}  // namespace

Vm Vm::attach(pid_t pid, const std::string& offsets_file, bool wait_for_boot) {
    if (pid <= 0) throw UserError(fmt::format("invalid pid {}", pid));
    if (kill(pid, 0) != 0 && errno == ESRCH) throw UserError(fmt::format("no such process: {}", pid));

    Vm vm(pid);
    vm.wait_boot_ = wait_for_boot;
    std::error_code ec;
    vm.exe_ = fs::read_symlink(fmt::format("/proc/{}/exe", pid), ec).string();
    if (ec) {
        if (ec == std::errc::no_such_file_or_directory)
            throw UserError(fmt::format("no such process: {} (or it is a kernel thread)", pid));
        throw UserError(fmt::format("cannot inspect process {}: {} (need root or CAP_SYS_PTRACE)", pid, ec.message()));
    }
    std::string comm = read_file(fmt::format("/proc/{}/comm", pid));
    while (!comm.empty() && comm.back() == '\n') comm.pop_back();
    std::string base = fs::path(vm.exe_).filename().string();
    if (base.rfind("beam", 0) != 0)
        throw UserError(fmt::format("process {} ({}) is not a BEAM VM: its executable is {}", pid, comm, vm.exe_));

    // The inode its first mapping maps, not a path (target/target_file.hpp): a VM in a container
    // has its files in another mount namespace, where the path may name something else.
    auto exe_map = exe_mapping(pid, read_maps(pid));
    if (!exe_map) throw UserError(fmt::format("cannot find where {} is mapped in process {}", vm.exe_, pid));
    auto file = open_mapped_file(pid, *exe_map);
    if (!file) throw UserError(fmt::format("cannot read the executable of process {}: {}", pid, file.error()));
    vm.exe_file_ = std::make_shared<const TargetFile>(std::move(*file));
    auto elf = ElfFile::open(vm.exe_file_->fd.get(), vm.exe_);
    if (!elf) throw UserError(fmt::format("cannot read the executable of process {}: {}", pid, elf.error()));
    vm.elf_.emplace(std::move(*elf));
    vm.identify();
    vm.load_bias_ = exe_map->start - vm.elf_->first_load_vaddr();
    vm.times_.mark("executable");
    if (vm.lacks_local_symbols()) {
        vm.find_debug_symbols();
        vm.times_.mark("debug file");
    }

    vm.choose_offsets(offsets_file);
    return vm;
}

// The release, flavor and architecture, from the binary itself; everything release-specific
// follows from release_.
void Vm::identify() {
    const std::string id = elf_->build_id().empty() ? "none" : elf_->build_id();
    auto b = read_vm_build_fd(exe_file_->fd.get(), kMaxVersionScanBytes);
    if (!b)
        throw UserError(
            fmt::format("process {} runs {} (build-id {}), which has no Erlang/OTP system version "
                        "string{}: not a BEAM VM beam-bpf can read",
                        pid_, exe_, id,
                        exe_file_->size > kMaxVersionScanBytes
                            ? fmt::format(" in its first {} MiB", kMaxVersionScanBytes >> 20)
                            : ""));
    build_ = *b;
    if (elf_->machine() != EM_X86_64 || !build_.bits64)
        throw UserError(fmt::format("process {} runs {} for {}: beam-bpf supports x86-64 only", pid_, build_.describe(),
                                    elf_->machine_name()));
    release_ = find_release(build_.otp_release);
    if (!release_) {
        std::vector<std::string> majors;
        for (const OtpRelease& r : known_releases())
            if (r.support == Support::Tested) majors.push_back(std::to_string(r.major));
        std::string tested = join(majors, ", ", " and ");
        throw UserError(fmt::format("process {} runs {} (build-id {}): beam-bpf supports {} (tested: {})", pid_,
                                    build_.describe(), id, supported_range(), tested));
    }
    if (build_.flavor != "jit" || !build_.native_stack)
        throw UserError(
            fmt::format("process {} runs {}: beam-bpf walks the stacks of the x86-64 JIT "
                        "(flavor jit), not the {} flavor; start the VM without -emu_flavor emu",
                        pid_, build_.describe(), build_.flavor));
    if (release_->support == Support::Described)
        caveat_ = fmt::format(
            "OTP {} is described from its sources but untested; the offsets passed the "
            "live checks",
            release_->major);
}

// Every tool reads the process table: a binary without its symbol is stripped of its local
// symbols (OTP 29 hides them all), and its debug file, found by build-id, has them.
bool Vm::lacks_local_symbols() const { return !elf_->find("erts_proc"); }

void Vm::find_debug_symbols() {
    if (!lacks_local_symbols()) return;
    auto d = find_debug_file(elf_->build_id());
    if (!d) {
        debug_tried_ = d.error();
        return;
    }
    auto debug = ElfFile::open(d->path);
    if (!debug) {
        debug_tried_ = debug.error();
        return;
    }
    elf_->adopt_symbols(*debug);
    symbols_origin_ = fmt::format("debug file {} ({})", d->path, d->source);
}

void Vm::find_globals(const VmOffsets& o) {
    if (!lacks_local_symbols()) return;
    GlobalsScan scan;
    scan.mem = &mem_;
    for (const ElfSegment& g : elf_->segments())
        if (g.writable) scan.data.emplace_back(g.vaddr + load_bias_, g.vaddr + load_bias_ + g.memsz);
    scan.maps = read_maps(pid_);
    scan.o = &o;
    for (const auto& t : threads()) {
        scan.normal += release_->normal.number(t.name) > 0;
        scan.dirty_cpu += release_->dirty_cpu.number(t.name) > 0;
        scan.dirty_io += release_->dirty_io.number(t.name) > 0;
    }
    scan.atom_text_binary = release_->atom_text == AtomText::binary;
    globals_ = bb::find_globals(scan);
    symbols_origin_ = "VM's memory";
    // The code events' probe (sampling/sampler.cpp) goes on a function, found by the
    // descriptor's address in the binary's code: without it a reloaded module is named from
    // the module list re-read, up to a second late.
    if (auto d = globals_.at.find("__jit_debug_descriptor"); d != globals_.at.end()) {
        if (auto f = find_jit_register_code(exe_file_->fd.get(), elf_->segments(), d->second - load_bias_))
            elf_->add_symbol("__jit_debug_register_code", *f, 5, true);
        else globals_.why_not["__jit_debug_register_code"] = f.error();
    }
}

void Vm::choose_offsets(const std::string& offsets_file) {
    const std::string& build_id = elf_->build_id();
    const std::string what = fmt::format("{} (build-id {})", build_.describe(), build_id.empty() ? "none" : build_id);
    std::string err;
    std::optional<VmOffsets> off;
    bool may_correct = false;  // only values that were not read for this very build
    if (!offsets_file.empty()) {
        auto parsed = parse_table(read_file(offsets_file));
        if (!parsed) throw UserError(fmt::format("offset table {}: {}", offsets_file, parsed.error()));
        off = std::move(*parsed);
        if (!off->build_id.empty() && off->build_id != build_id)
            throw UserError(fmt::format("offset table {} is for build-id {}, but process {} runs {}", offsets_file,
                                        off->build_id, pid_, what));
        if (off->build_id.empty() &&
            (off->otp_release != std::to_string(build_.otp_release) || off->features != build_.features))
            throw UserError(fmt::format("offset table {} is for OTP {} ({}), but process {} runs {}", offsets_file,
                                        off->otp_release, off->features.empty() ? "no features" : off->features, pid_,
                                        what));
        off->origin = "table " + offsets_file;
    } else if (auto dwarf = offsets_from_dwarf(exe_file_->fd_path())) {
        // Its own DWARF, or a separate debug file (by build-id: /usr/lib/debug, debuginfod).
        off = std::move(*dwarf);
        if (elf_->has_debug_info()) off->origin = "DWARF of " + exe_;
    } else if (elf_->has_debug_info()) {
        throw UserError(fmt::format("DWARF of {}: {}", exe_, dwarf.error()));
    } else if ((off = builtin_offsets(std::to_string(build_.otp_release), build_.features, build_id))) {
        may_correct = off->build_id != build_id;
    } else {
        // No table for this release and build features: start from the release's nearest
        // table and let the live VM correct and then check it.
        off = builtin_offsets(std::to_string(release_->layout_from), "", "");
        if (!off)
            throw UserError(
                fmt::format("process {} runs {}: no offset table for it; make one with "
                            "scripts/make-offsets.sh from a -g build, or pass --offsets FILE",
                            pid_, what));
        off->origin += fmt::format(" (the layout of OTP {})", release_->layout_from);
        may_correct = true;
        if (caveat_.empty())
            caveat_ = fmt::format(
                "no offset table for {}: the layout of OTP {} was checked, and corrected "
                "where it did not fit, in the live VM",
                build_.features.empty() ? "this build" : build_.features, release_->layout_from);
    }
    off->build_id = build_id;
    off->otp_release = std::to_string(build_.otp_release);
    off->features = build_.features;
    times_.mark("offsets");

    if (lacks_local_symbols()) {
        find_globals(*off);
        times_.mark("globals search");
    }
    std::string why;
    try {
        wait_for_boot(*off);
        times_.mark("boot");
        why = layout_mismatch(*off);
    } catch (const UserError& e) {
        throw UserError(fmt::format("process {} runs {}: {}", pid_, what, e.what()));
    }
    if (!why.empty() && may_correct && correct_layout(*off)) {
        why = layout_mismatch(*off);
        if (why.empty()) off->origin += ", corrected in the live VM";
    }
    if (!why.empty())
        throw UserError(
            fmt::format("offsets ({}) do not match process {} ({}): {}; refusing to report garbage. "
                        "Make a table with scripts/make-offsets.sh from a -g build of this VM's "
                        "source and configure flags, or pass --offsets FILE",
                        off->origin, pid_, what, why));
    offsets_ = *off;

    // How pids map to process-table slots, chosen by the VM at start (OTP 26 on).
    if (release_->pids.pixdata) {
        uint64_t ptab = symbol_address("erts_proc");
        auto u64 = [&](uint32_t off) { return mem_.read<uint64_t>(ptab + off); };
        auto u32 = [&](uint32_t off) { return mem_.read<uint32_t>(ptab + off); };
        auto m = u64(offsets_.ptab_pix_mask), cl = u64(offsets_.ptab_pix_cl_mask),
             cli = u64(offsets_.ptab_pix_cli_mask);
        auto cls = u32(offsets_.ptab_pix_cl_shift), clis = u32(offsets_.ptab_pix_cli_shift);
        if (!m || !cl || !cli || !cls || !clis || *cls > 63 || *clis > 63)
            throw UserError(fmt::format("cannot read the process table's pid layout in process {}", pid_));
        pix_ = {*m, *cl, *cli, *cls, *clis};
        // Each process sits in the slot its pid's low bits name (erts_ptab_pixdata2pix), and
        // printing a pid then parsing it gives the same term back.
        uint64_t tab = mem_.read<uint64_t>(ptab + offsets_.ptab_tab).value_or(0);
        for (uint32_t ix = 0, seen = 0; tab && ix < 4096 && seen < 64; ix++) {
            auto p = mem_.read<uint64_t>(tab + 8ull * ix);
            auto id = p && *p && !(*p & 7) ? mem_.read<uint64_t>(*p + offsets_.proc_id) : std::nullopt;
            if (!id) continue;
            seen++;
            if (((*id >> 4) & pix_.mask) != ix || parse_pid(format_pid(*id)) != *id)
                throw UserError(
                    fmt::format("the process table's pid layout in process {} does not fit its pid {} "
                                "in slot {}",
                                pid_, format_pid(*id), ix));
        }
    }
    times_.mark("live checks");
}

bool Vm::has_symbol(const std::string& name) const { return elf_->find(name) || globals_.at.count(name); }

uint64_t Vm::symbol_address(const std::string& name) const {
    if (auto s = elf_->find(name)) return s->value + load_bias_;
    if (auto it = globals_.at.find(name); it != globals_.at.end()) return it->second;
    auto why = globals_.why_not.find(name);
    throw UserError(
        fmt::format("{} has no symbol {} (stripped; OTP 28 and later hide it), no debug file for build-id {} ({}){}",
                    exe_, name, elf_->build_id().empty() ? "none" : elf_->build_id(),
                    debug_tried_.empty() ? "not looked for" : debug_tried_,
                    why != globals_.why_not.end() ? ", and it was not found in the VM's memory: " + why->second
                                                  : ", and it is not one beam-bpf can find in the VM's memory"));
}

std::string Vm::missing_local_symbols() const {
    if (!lacks_local_symbols()) return "";
    return fmt::format(
        "{} is stripped, and OTP 28 and later keep the VM's functions out of its dynamic symbols; no "
        "debug file for build-id {} was found ({}): install the build's debug file there (a "
        "distribution's -dbgsym or -debuginfo package) or set DEBUGINFOD_URLS to a server that has it",
        exe_, elf_->build_id().empty() ? "none" : elf_->build_id(), debug_tried_);
}

}  // namespace bb
