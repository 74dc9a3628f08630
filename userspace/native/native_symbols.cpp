#include "native/native_symbols.hpp"
#include "target/proc_maps.hpp"
#include "target/target_file.hpp"

#include <elfutils/libdwfl.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <stdexcept>

namespace bb {

namespace {

// What the callbacks need of the modules reported.
struct Reported {
    pid_t pid = 0;
    // Each module's first mapping, by its start: libdwfl asks for the file of a module the
    // first time it needs its symbols, and gets the inode that mapping maps.
    std::map<uint64_t, Mapping> first_mapping;
    std::vector<char> vdso;  // a copy of this process's vDSO (the same kernel image as the VM's)
};

// The modules being reported or looked up: libdwfl's callbacks get no context of ours. One
// NativeSymbols works at a time on a thread (report() and lookup() set it).
thread_local Reported* current = nullptr;

// libdwfl opens nothing itself: a module's file is what target/target_file.hpp opened (the
// mapping's own inode, checked), read with ELF_C_READ (pread, not mmap: a file the target
// truncates gives read errors, not SIGBUS). libdwfl owns the Elf and the descriptor after.
int find_elf(Dwfl_Module*, void**, const char*, Dwarf_Addr base, char**, Elf** elfp) {
    if (!current) return -1;
    auto it = current->first_mapping.find(base);
    if (it == current->first_mapping.end()) return -1;
    if (it->second.path == "[vdso]") {
        if (current->vdso.empty()) return -1;
        *elfp = elf_memory(current->vdso.data(), current->vdso.size());
        return -1;
    }
    auto f = open_mapped_file(current->pid, it->second);
    if (!f) return -1;
    *elfp = elf_begin(f->fd.get(), ELF_C_READ, nullptr);
    return *elfp ? f->fd.release() : -1;
}

// Separate debug files by build-id only: the host's /usr/lib/debug/.build-id/xx/yyyy.debug (hex
// digits in a host path), then debuginfod when DEBUGINFOD_URLS is set. libdwfl's search by the
// .gnu_debuglink name, a string in the target's file, beside the main file or under
// /usr/lib/debug, would open paths the target chooses: it gets no file name and no link.
int find_debuginfo(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base, const char*,
                   const char*, GElf_Word, char** debuginfo_file_name) {
    return dwfl_standard_find_debuginfo(mod, userdata, modname, base, nullptr, nullptr, 0, debuginfo_file_name);
}

// libdwfl keeps a pointer to the callbacks, so they must outlive every Dwfl.
char* debuginfo_path = nullptr;  // libdwfl's default search path
const Dwfl_Callbacks callbacks = {
    .find_elf = find_elf,
    .find_debuginfo = find_debuginfo,
    .section_address = nullptr,
    .debuginfo_path = &debuginfo_path,
};

std::string basename_of(const char* path) {
    if (!path) return {};
    const char* slash = std::strrchr(path, '/');
    return slash ? slash + 1 : path;
}

// This process's vDSO image: every 64-bit process on this kernel maps the same one.
std::vector<char> own_vdso() {
    auto base = getauxval(AT_SYSINFO_EHDR);
    if (!base) return {};
    for (const auto& m : read_maps(getpid()))
        if (m.path == "[vdso]" && m.start == base) return {reinterpret_cast<const char*>(m.start), reinterpret_cast<const char*>(m.end)};
    return {};
}

}  // namespace

struct NativeSymbols::Impl {
    Reported r;
    std::unique_ptr<Dwfl, void (*)(Dwfl*)> dwfl{nullptr, dwfl_end};
    void report();
};

// The modules: each run of mappings of one file (by device and inode) that starts at its
// offset 0, as libdwfl's own /proc/PID/maps reader groups them, a deleted library included
// (named without " (deleted)"); and the vDSO.
void NativeSymbols::Impl::report() {
    current = &r;
    auto maps = read_maps(r.pid);
    if (maps.empty()) throw std::runtime_error("cannot read the mappings of process " + std::to_string(r.pid));
    dwfl_report_begin(dwfl.get());
    r.first_mapping.clear();
    for (size_t i = 0; i < maps.size();) {
        const Mapping& m = maps[i];
        size_t j = i + 1;
        if (m.path == "[vdso]") {
            if (dwfl_report_module(dwfl.get(), "[vdso]", m.start, m.end)) r.first_mapping[m.start] = m;
        } else if (m.inode != 0 && !m.path.empty() && m.path[0] == '/') {
            while (j < maps.size() && maps[j].inode == m.inode && maps[j].dev_major == m.dev_major &&
                   maps[j].dev_minor == m.dev_minor && maps[j].start >= maps[j - 1].end)
                j++;
            std::string name = m.deleted() ? m.path.substr(0, m.path.size() - 10) : m.path;
            if (m.offset == 0 && dwfl_report_module(dwfl.get(), name.c_str(), m.start, maps[j - 1].end))
                r.first_mapping[m.start] = m;
        }
        i = j;
    }
    // Ends the report even on failure: dwfl_report_end drops modules not reported again.
    if (dwfl_report_end(dwfl.get(), nullptr, nullptr) != 0)
        throw std::runtime_error("cannot report the mappings of process " + std::to_string(r.pid) + ": " +
                                 dwfl_errmsg(-1));
}

NativeSymbols::NativeSymbols(pid_t pid) : impl_(std::make_unique<Impl>()) {
    impl_->r.pid = pid;
    impl_->r.vdso = own_vdso();
    impl_->dwfl.reset(dwfl_begin(&callbacks));
    if (!impl_->dwfl) throw std::runtime_error(std::string("dwfl_begin: ") + dwfl_errmsg(-1));
    impl_->report();
}

NativeSymbols::~NativeSymbols() = default;

void NativeSymbols::refresh() { impl_->report(); }

std::optional<NativeSymbol> NativeSymbols::lookup(uint64_t addr) {
    current = &impl_->r;
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
