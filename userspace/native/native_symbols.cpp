#include "native/native_symbols.hpp"
#include "target/proc_maps.hpp"

#include <elfutils/libdwfl.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <stdexcept>

namespace bb {

namespace {

// The pid whose modules are being reported or looked up: libdwfl's callbacks get no context of
// ours. One NativeSymbols works at a time on a thread (report() and lookup() set it).
thread_local pid_t current_pid = 0;

// Mapped paths are the target's: a VM in a container has its files in its own mount
// namespace, where the same path may name another file than here (or none). The kernel
// resolves /proc/PID/root/PATH in the target's namespace, and to the same file for a VM on
// the host.
int find_elf_in_target(Dwfl_Module* mod, void** userdata, const char* module_name, Dwarf_Addr base,
                       char** file_name, Elf** elfp) {
    if (current_pid > 0 && module_name && module_name[0] == '/' && !std::strstr(module_name, " (deleted)")) {
        std::string in_target = root_path(current_pid, module_name);
        return dwfl_linux_proc_find_elf(mod, userdata, in_target.c_str(), base, file_name, elfp);
    }
    return dwfl_linux_proc_find_elf(mod, userdata, module_name, base, file_name, elfp);
}

// libdwfl keeps a pointer to the callbacks, so they must outlive every Dwfl.
char* debuginfo_path = nullptr;  // libdwfl's default search path
const Dwfl_Callbacks proc_callbacks = {
    .find_elf = find_elf_in_target,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = nullptr,
    .debuginfo_path = &debuginfo_path,
};

struct DwflDeleter {
    void operator()(Dwfl* d) const { dwfl_end(d); }
};

std::string basename_of(const char* path) {
    if (!path) return {};
    const char* slash = std::strrchr(path, '/');
    return slash ? slash + 1 : path;
}

}  // namespace

struct NativeSymbols::Impl {
    pid_t pid;
    std::unique_ptr<Dwfl, DwflDeleter> dwfl;

    void report() {
        current_pid = pid;
        dwfl_report_begin(dwfl.get());
        int rc = dwfl_linux_proc_report(dwfl.get(), pid);
        if (rc == EACCES) {
            // libdwfl first reads /proc/PID/auxv (to spot the vDSO), which is mode 0400 of the
            // VM's owner: with CAP_SYS_PTRACE but no CAP_DAC_READ_SEARCH (the documented non-root
            // setup) that open fails, while /proc/PID/maps (0444, same ptrace check) reads fine.
            // Report the maps alone then: only the vDSO goes unnamed (libdwfl would read its
            // image from /proc/PID/mem, mode 0600, which such a user cannot open either).
            std::string maps_path = "/proc/" + std::to_string(pid) + "/maps";
            if (FILE* maps = std::fopen(maps_path.c_str(), "r")) {
                rc = dwfl_linux_proc_maps_report(dwfl.get(), maps);
                std::fclose(maps);
            } else {
                rc = errno;
            }
        }
        // Ends the report even on failure: dwfl_report_end drops modules not reported again.
        if (dwfl_report_end(dwfl.get(), nullptr, nullptr) != 0 || rc != 0) {
            std::string why = rc > 0 ? std::strerror(rc) : dwfl_errmsg(-1);
            throw std::runtime_error("cannot read the mappings of process " + std::to_string(pid) +
                                     ": " + why);
        }
    }
};

NativeSymbols::NativeSymbols(pid_t pid) : impl_(std::make_unique<Impl>()) {
    impl_->pid = pid;
    impl_->dwfl.reset(dwfl_begin(&proc_callbacks));
    if (!impl_->dwfl) throw std::runtime_error(std::string("dwfl_begin: ") + dwfl_errmsg(-1));
    impl_->report();
}

NativeSymbols::~NativeSymbols() = default;

void NativeSymbols::refresh() { impl_->report(); }

std::optional<NativeSymbol> NativeSymbols::lookup(uint64_t addr) {
    current_pid = impl_->pid;
    Dwfl_Module* mod = dwfl_addrmodule(impl_->dwfl.get(), addr);
    if (!mod) return std::nullopt;

    NativeSymbol s;
    Dwarf_Addr start = 0;
    // For modules reported from /proc/PID/maps, the module name is the mapped file's path.
    const char* path = dwfl_module_info(mod, nullptr, &start, nullptr, nullptr, nullptr, nullptr,
                                        nullptr);
    s.module = basename_of(path);

    GElf_Off offset = 0;
    GElf_Sym sym;
    const char* name = dwfl_module_addrinfo(mod, addr, &offset, &sym, nullptr, nullptr, nullptr);
    if (name) {
        s.name = name;
        s.offset = offset;
        s.size = sym.st_size;
    } else {
        s.offset = addr - start;  // no symbol: relative to where the module is mapped
    }
    return s;
}

void KernelSymbols::load() {
    if (loaded_) return;
    loaded_ = true;
    std::ifstream in("/proc/kallsyms");
    std::string line;
    while (std::getline(in, line)) {
        // "ffffffff81000000 T _stext [module]": text symbols only.
        std::istringstream ls(line);
        std::string addr, type, name;
        if (!(ls >> addr >> type >> name) || (type != "T" && type != "t")) continue;
        uint64_t a = std::strtoull(addr.c_str(), nullptr, 16);
        if (a) syms_.emplace_back(a, std::move(name));
    }
    std::sort(syms_.begin(), syms_.end());
    if (syms_.empty()) unavailable_ = "/proc/kallsyms shows no addresses (kernel.kptr_restrict, or not root)";
}

std::optional<std::string> KernelSymbols::lookup(uint64_t addr) {
    load();
    auto it = std::upper_bound(syms_.begin(), syms_.end(), addr, [](uint64_t a, const auto& s) { return a < s.first; });
    if (it == syms_.begin() || it == syms_.end()) return std::nullopt;  // past the last: not text we know
    return std::prev(it)->second;
}

}  // namespace bb
