#include "target/elf_file.hpp"

#include "base/interner.hpp"

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string_view>
#include <tuple>

namespace bb {
namespace {

// Owns a descriptor that lives in the caller's frame.
struct FdCloser {
    void operator()(const int* fd) const { ::close(*fd); }
};

struct ElfCloser {
    void operator()(Elf* e) const { elf_end(e); }
};

Fail fail(const std::string& path, std::string_view what) {
    return Fail{"cannot read ELF file " + path + ": " + std::string(what)};
}

std::string hex(const unsigned char* p, size_t n) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string s;
    s.reserve(n * 2);
    for (size_t i = 0; i < n; i++) {
        s += digits[p[i] >> 4];
        s += digits[p[i] & 15];
    }
    return s;
}

// The NT_GNU_BUILD_ID note in one block of notes (a section or a segment), or "".
std::string build_id_in(Elf_Data* notes) {
    if (!notes) return {};
    GElf_Nhdr nhdr;
    size_t off = 0, name_off = 0, desc_off = 0, next;
    while ((next = gelf_getnote(notes, off, &nhdr, &name_off, &desc_off)) > 0) {
        const auto* base = static_cast<const unsigned char*>(notes->d_buf);
        if (nhdr.n_type == NT_GNU_BUILD_ID && nhdr.n_namesz == 4 && std::memcmp(base + name_off, "GNU", 4) == 0 &&
            nhdr.n_descsz > 0)
            return hex(base + desc_off, nhdr.n_descsz);
        off = next;
    }
    return {};
}

}  // namespace

Result<ElfFile> ElfFile::open(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return fail(path, std::strerror(errno));
    std::unique_ptr<const int, FdCloser> fd_owner(&fd);
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return fail(path, "not a regular file");
    return open(fd, path);
}

Result<ElfFile> ElfFile::open(int fd, const std::string& name) {
    ElfFile f(name);
    if (std::string why = f.read(fd); !why.empty()) return fail(name, why);
    return f;
}

std::string ElfFile::read(int fd) {
    if (elf_version(EV_CURRENT) == EV_NONE) return "libelf is too old";
    // ELF_C_READ: libelf reads what is asked for with pread. A mapping (ELF_C_READ_MMAP) of a
    // file the target truncates would fault (SIGBUS) where a read just comes up short.
    std::unique_ptr<Elf, ElfCloser> elf(elf_begin(fd, ELF_C_READ, nullptr));
    if (!elf) return elf_errmsg(-1);
    if (elf_kind(elf.get()) != ELF_K_ELF) return "not an ELF file";
    GElf_Ehdr ehdr;
    if (!gelf_getehdr(elf.get(), &ehdr)) return elf_errmsg(-1);
    machine_ = ehdr.e_machine;

    size_t shstrndx = 0;
    bool have_names = elf_getshdrstrndx(elf.get(), &shstrndx) == 0;

    // Sections: the build-id note, .debug_info, and the symbol tables to read afterwards.
    std::vector<Elf_Scn*> symtabs;
    for (Elf_Scn* scn = elf_nextscn(elf.get(), nullptr); scn; scn = elf_nextscn(elf.get(), scn)) {
        GElf_Shdr shdr;
        if (!gelf_getshdr(scn, &shdr)) continue;
        const char* name = have_names ? elf_strptr(elf.get(), shstrndx, shdr.sh_name) : nullptr;
        if (shdr.sh_type == SHT_NOTE && build_id_.empty()) build_id_ = build_id_in(elf_getdata(scn, nullptr));
        else if (shdr.sh_type == SHT_SYMTAB || shdr.sh_type == SHT_DYNSYM) symtabs.push_back(scn);
        // In a stripped file's separate debug file the code sections are NOBITS but
        // .debug_info is real; in the stripped file itself it is absent.
        else if (name && std::string_view(name) == ".debug_info" && shdr.sh_type != SHT_NOBITS) has_debug_info_ = true;
    }

    size_t phnum = 0;
    if (elf_getphdrnum(elf.get(), &phnum) != 0) phnum = 0;
    bool have_load = false, have_zero = false;
    for (size_t i = 0; i < phnum; i++) {
        GElf_Phdr phdr;
        if (!gelf_getphdr(elf.get(), int(i), &phdr)) continue;
        if (phdr.p_type == PT_LOAD && segments_.size() < 64)
            segments_.push_back({phdr.p_vaddr, phdr.p_memsz, phdr.p_offset, phdr.p_filesz, (phdr.p_flags & PF_W) != 0,
                                 (phdr.p_flags & PF_X) != 0});
        if (phdr.p_type == PT_LOAD && !have_load) {
            // Normally the first PT_LOAD maps offset 0; if not, p_vaddr - p_offset is still the
            // address that offset 0 would have, which is what the load bias is measured against.
            first_load_vaddr_ = phdr.p_vaddr - phdr.p_offset;
            have_load = true;
        }
        if (phdr.p_type == PT_LOAD && phdr.p_offset == 0 && !have_zero) {
            first_load_vaddr_ = phdr.p_vaddr;
            have_zero = true;
        }
    }
    // Files without section headers still carry the build-id in a PT_NOTE segment.
    for (size_t i = 0; i < phnum && build_id_.empty(); i++) {
        GElf_Phdr phdr;
        if (gelf_getphdr(elf.get(), int(i), &phdr) && phdr.p_type == PT_NOTE)
            build_id_ = build_id_in(elf_getdata_rawchunk(elf.get(), phdr.p_offset, phdr.p_filesz, ELF_T_NHDR));
    }

    std::vector<ElfSymbol> symbols;
    for (Elf_Scn* scn : symtabs) {
        GElf_Shdr shdr;
        Elf_Data* data = elf_getdata(scn, nullptr);
        if (!gelf_getshdr(scn, &shdr) || !data || shdr.sh_entsize == 0) continue;
        // Symbols with section indices past SHN_LORESERVE keep the real index in a side table.
        Elf_Data* xndx = nullptr;
        if (int x = elf_scnshndx(scn); x > 0) xndx = elf_getdata(elf_getscn(elf.get(), size_t(x)), nullptr);
        size_t count = data->d_size / shdr.sh_entsize;
        for (size_t i = 0; i < count; i++) {
            GElf_Sym sym;
            Elf32_Word shndx_ext = 0;
            if (!gelf_getsymshndx(data, xndx, int(i), &sym, &shndx_ext)) continue;
            size_t shndx = sym.st_shndx == SHN_XINDEX ? shndx_ext : sym.st_shndx;
            int type = GELF_ST_TYPE(sym.st_info);
            if (shndx == SHN_UNDEF || (shndx >= SHN_LORESERVE && sym.st_shndx != SHN_XINDEX) || type == STT_SECTION ||
                type == STT_FILE)
                continue;
            const char* name = elf_strptr(elf.get(), shdr.sh_link, sym.st_name);
            // A debug file's .symtab spells versioned symbols "pthread_getspecific@@GLIBC_2.34":
            // named as the source names them (and their versions one symbol).
            const size_t name_len = name ? std::strcspn(name, "@") : 0;
            GElf_Shdr home;
            if (name_len == 0 || !gelf_getshdr(elf_getscn(elf.get(), shndx), &home)) continue;
            symbols.push_back(ElfSymbol{
                .name = std::string(name, name_len),
                .value = sym.st_value,
                .size = sym.st_size,
                .file_offset = sym.st_value - home.sh_addr + home.sh_offset,
                .is_func = type == STT_FUNC || type == STT_GNU_IFUNC,
            });
        }
    }
    set_symbols(std::move(symbols));
    return "";
}

void ElfFile::set_symbols(std::vector<ElfSymbol> symbols) {
    // A symbol in both .symtab and .dynsym (or in a file and its debug file) is one symbol;
    // keep the first copy.
    auto key = [](const ElfSymbol& s) { return std::tie(s.name, s.value); };
    std::stable_sort(symbols.begin(), symbols.end(),
                     [&](const ElfSymbol& a, const ElfSymbol& b) { return key(a) < key(b); });
    symbols.erase(std::unique(symbols.begin(), symbols.end(),
                              [&](const ElfSymbol& a, const ElfSymbol& b) { return key(a) == key(b); }),
                  symbols.end());
    // beam.smp's symbols were half a MiB of every VM the agent follows.
    size_t h = std::hash<std::string>{}(build_id_) ^ symbols.size();
    for (const ElfSymbol& s : symbols) h = h * 1000003 ^ (s.value + s.size * 31 + s.name.size());
    static Interner<std::vector<ElfSymbol>> shared;
    symbols_ = shared.get(std::move(symbols), h);
}

void ElfFile::adopt_symbols(const ElfFile& debug) {
    std::vector<ElfSymbol> all = *symbols_;
    for (ElfSymbol s : debug.symbols()) {
        const ElfSegment* home = nullptr;
        for (const ElfSegment& g : segments_)
            if (s.value >= g.vaddr && s.value - g.vaddr < g.filesz) home = &g;
        if (!home && s.is_func) continue;
        s.file_offset = home ? s.value - home->vaddr + home->offset : 0;
        all.push_back(std::move(s));
    }
    set_symbols(std::move(all));
}

bool ElfFile::add_symbol(const std::string& name, uint64_t value, uint64_t size, bool is_func) {
    for (const ElfSegment& g : segments_)
        if (value >= g.vaddr && value - g.vaddr < g.filesz) {
            std::vector<ElfSymbol> all = *symbols_;
            all.push_back({name, value, size, value - g.vaddr + g.offset, is_func});
            set_symbols(std::move(all));
            return true;
        }
    return false;
}

std::optional<ElfSymbol> ElfFile::find(const std::string& name) const {
    auto it = std::lower_bound(symbols_->begin(), symbols_->end(), name,
                               [](const ElfSymbol& s, const std::string& n) { return s.name < n; });
    if (it == symbols_->end() || it->name != name) return std::nullopt;
    return *it;
}

std::string ElfFile::machine_name() const {
    switch (machine_) {
    case EM_X86_64: return "x86-64";
    case EM_AARCH64: return "arm64";
    case EM_386: return "x86 (32-bit)";
    case EM_ARM: return "arm (32-bit)";
    case EM_RISCV: return "riscv";
    case EM_PPC64: return "ppc64";
    default: return "ELF machine " + std::to_string(machine_);
    }
}

}  // namespace bb
