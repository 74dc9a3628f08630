#include "native/native_symbols.hpp"
#include "target/proc_maps.hpp"
#include "target/target_file.hpp"
#include "native/unwind_store.hpp"

#include <elfutils/libdwfl.h>
#include <sys/auxv.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <utility>
#include <sstream>
#include <string>
#include <stdexcept>

namespace bb {

// One file's symbols as libdwfl reads them (its .symtab or .dynsym, or a separate debug file's
// found by build-id), held once for every VM that maps the file: beam.smp's and libc's were read
// again for each VM. Found by the file's identity as the kernel gives it (FileId: the inode the
// mapping maps), never by its build-id, which a target can write into any file; two VMs mapping
// one inode see the same bytes. The module is reported at its link-time addresses: a VM's
// address is looked up less that VM's load bias.
struct FileSymbols {
    std::unique_ptr<Dwfl, void (*)(Dwfl*)> dwfl{nullptr, dwfl_end};
    Dwfl_Module* mod = nullptr;
    uint64_t link_base = 0;  // the link-time address of file offset 0 (where mapping offset 0 is)
    uint64_t bias = 0;       // libdwfl's, reported at link_base: 0 but where its phdr rules differ
};

namespace {

// The ELF being handed to libdwfl: its find_elf callback gets no context of ours.
struct Opening {
    Elf* elf = nullptr;
    int fd = -1;  // owned by libdwfl once given
};
thread_local Opening* opening = nullptr;

// libdwfl opens nothing itself: a module's file is what target/target_file.hpp opened (the
// mapping's own inode, checked), read with ELF_C_READ (pread, not mmap: a file the target
// truncates gives read errors, not SIGBUS). libdwfl owns the Elf and the descriptor after.
int find_elf(Dwfl_Module*, void**, const char*, Dwarf_Addr, char**, Elf** elfp) {
    if (!opening || !opening->elf) return -1;
    *elfp = std::exchange(opening->elf, nullptr);
    return std::exchange(opening->fd, -1);
}

// Separate debug files by build-id only: the host's /usr/lib/debug/.build-id/xx/yyyy.debug (hex
// digits in a host path), then debuginfod when DEBUGINFOD_URLS is set. libdwfl's search by the
// .gnu_debuglink name, a string in the target's file, beside the main file or under
// /usr/lib/debug, would open paths the target chooses: it gets no file name and no link.
int find_debuginfo(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base, const char*, const char*,
                   GElf_Word, char** debuginfo_file_name) {
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

std::string basename_of(const std::string& path) {
    auto slash = path.rfind('/');
    return slash == std::string::npos ? path : path.substr(slash + 1);
}

// This process's vDSO image: every 64-bit process on this kernel maps the same one.
const std::vector<char>& own_vdso() {
    static const std::vector<char> image = [] {
        auto base = getauxval(AT_SYSINFO_EHDR);
        if (base)
            for (const auto& m : read_maps(getpid()))
                if (m.path == "[vdso]" && m.start == base)
                    return std::vector<char>(reinterpret_cast<const char*>(m.start),
                                             reinterpret_cast<const char*>(m.end));
        return std::vector<char>{};
    }();
    return image;
}

// The link-time address of file offset 0: the first PT_LOAD's address less its offset. nullopt
// for a file with no loadable segment (not code).
std::optional<uint64_t> link_base_of(Elf* elf) {
    size_t n = 0;
    if (elf_getphdrnum(elf, &n) != 0) return std::nullopt;
    for (size_t i = 0; i < n; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(elf, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD && ph.p_vaddr >= ph.p_offset)
            return ph.p_vaddr - ph.p_offset;
    }
    return std::nullopt;
}

// Every file's symbols now held, weakly: the last VM mapping a file releases them.
std::mutex cache_mutex;
std::map<FileId, std::weak_ptr<FileSymbols>> cache;

// A libdwfl module of `elf` (given to it with `fd`) spanning `span` bytes; null if libdwfl
// refuses it. Takes `elf` and `fd` either way.
std::shared_ptr<FileSymbols> make_symbols(const std::string& name, Elf* elf, int fd, uint64_t span) {
    auto base = link_base_of(elf);
    auto fs = std::make_shared<FileSymbols>();
    fs->dwfl.reset(dwfl_begin(&callbacks));
    Opening o{elf, fd};
    if (base && fs->dwfl) {
        fs->link_base = *base;
        dwfl_report_begin(fs->dwfl.get());
        fs->mod = dwfl_report_module(fs->dwfl.get(), name.c_str(), *base, *base + span);
        dwfl_report_end(fs->dwfl.get(), nullptr, nullptr);
        Dwarf_Addr bias = 0;
        opening = &o;
        if (fs->mod && !dwfl_module_getelf(fs->mod, &bias)) fs->mod = nullptr;  // reads the ELF now, through find_elf
        opening = nullptr;
        fs->bias = bias;
    }
    if (o.elf) elf_end(o.elf);  // not taken by libdwfl
    if (o.fd >= 0) close(o.fd);
    return fs->mod ? fs : nullptr;
}

}  // namespace

NativeSymbols::NativeSymbols(pid_t pid) : pid_(pid) { refresh(); }

NativeSymbols::~NativeSymbols() = default;

void NativeSymbols::refresh() {
    auto maps = read_maps(pid_);
    if (maps.empty()) throw std::runtime_error("cannot read the mappings of process " + std::to_string(pid_));
    std::map<uint64_t, Module> now;
    for (size_t i = 0; i < maps.size();) {
        const Mapping& m = maps[i];
        size_t j = i + 1;
        Module mod;
        if (m.path == "[vdso]") {
            mod.end = m.end;
            mod.name = "[vdso]";
        } else if (m.inode != 0 && !m.path.empty() && m.path[0] == '/') {
            while (j < maps.size() && maps[j].inode == m.inode && maps[j].dev_major == m.dev_major &&
                   maps[j].dev_minor == m.dev_minor && maps[j].start >= maps[j - 1].end)
                j++;
            if (m.offset == 0) {
                mod.end = maps[j - 1].end;
                mod.name = basename_of(m.deleted() ? m.path.substr(0, m.path.size() - 10) : m.path);
            }
        }
        if (mod.end) {
            mod.first = m;
            // The same mapping as at the last reading keeps what was found of it.
            auto was = modules_.find(m.start);
            if (was != modules_.end() && was->second.end == mod.end && was->second.first.inode == m.inode &&
                was->second.first.dev_major == m.dev_major && was->second.first.dev_minor == m.dev_minor &&
                was->second.first.path == m.path)
                mod = std::move(was->second);
            now.emplace(m.start, std::move(mod));
        }
        i = j;
    }
    modules_ = std::move(now);
}

// The symbols of `m`'s file: shared with every VM mapping the same inode (the vDSO: the same
// image in every process), read if none does yet.
void NativeSymbols::open(Module& m) {
    m.opened = true;
    const uint64_t span = m.end - m.first.start;
    FileId id{};  // the vDSO's: no file
    std::optional<TargetFile> f;
    if (m.name != "[vdso]") {
        auto opened = open_mapped_file(pid_, m.first);
        if (!opened) return;
        auto fid = file_id(opened->fd.get());
        if (!fid) return;
        id = *fid;
        f.emplace(std::move(*opened));
    } else if (own_vdso().empty()) {
        return;
    }
    std::lock_guard lock(cache_mutex);
    if (auto held = cache[id].lock()) {
        m.syms = std::move(held);
        return;
    }
    std::erase_if(cache, [](const auto& kv) { return kv.second.expired(); });
    if (f) {
        Elf* elf = elf_begin(f->fd.get(), ELF_C_READ, nullptr);
        if (!elf) return;
        m.syms = make_symbols(f->name, elf, f->fd.release(), span);
    } else {
        const auto& vdso = own_vdso();
        Elf* elf = elf_memory(const_cast<char*>(vdso.data()), vdso.size());
        if (!elf) return;
        m.syms = make_symbols("[vdso]", elf, -1, span);
    }
    if (m.syms) cache[id] = m.syms;
}

std::optional<NativeSymbol> NativeSymbols::lookup(uint64_t addr) {
    auto it = modules_.upper_bound(addr);
    if (it == modules_.begin()) return std::nullopt;
    --it;
    Module& m = it->second;
    if (addr >= m.end) return std::nullopt;
    if (!m.opened) open(m);

    NativeSymbol s;
    s.module = m.name;
    s.offset = addr - m.first.start;  // no symbol: relative to where the module is mapped
    if (!m.syms) return s;
    GElf_Off offset = 0;
    GElf_Sym sym;
    const uint64_t link_addr = addr - m.first.start + m.syms->link_base + m.syms->bias;
    if (const char* name = dwfl_module_addrinfo(m.syms->mod, link_addr, &offset, &sym, nullptr, nullptr, nullptr)) {
        // A debug file's .symtab spells versioned symbols "__pthread_mutex_lock@GLIBC_2.2.5":
        // named as the source names them.
        s.name.assign(name, std::strcspn(name, "@"));
        s.offset = offset;
        s.size = sym.st_size;
    }
    return s;
}

size_t NativeSymbols::files_held() {
    std::lock_guard lock(cache_mutex);
    return std::count_if(cache.begin(), cache.end(), [](const auto& kv) { return !kv.second.expired(); });
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
