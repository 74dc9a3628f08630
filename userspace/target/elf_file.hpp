// What beam-bpf needs from an ELF file on disk: its build-id and its symbols.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace bb {

struct ElfSymbol {
    std::string name;
    uint64_t value = 0;  // st_value: link-time virtual address
    uint64_t size = 0;
    uint64_t file_offset = 0;  // where the symbol's bytes are in the file (what uprobes take)
    bool is_func = false;
    bool operator==(const ElfSymbol&) const = default;
};

// A PT_LOAD segment: where a part of the file is mapped (vaddr, filesz from offset) and how
// much memory it takes (memsz: .bss is the part past filesz).
struct ElfSegment {
    uint64_t vaddr = 0, memsz = 0, offset = 0, filesz = 0;
    bool writable = false, executable = false;
};

class ElfFile {
public:
    // The file at `path`, or a one-line reason ("cannot read ELF file PATH: ...") when it cannot
    // be read as ELF: the file may be a target's, corrupt or hostile.
    static Result<ElfFile> open(const std::string& path);
    // From an open file (a target's, opened by open_mapped_file()); `name` for messages. The
    // descriptor is read during the call only.
    static Result<ElfFile> open(int fd, const std::string& name);

    const std::string& path() const { return path_; }
    // Lower-case hex of NT_GNU_BUILD_ID, empty when the file has none.
    const std::string& build_id() const { return build_id_; }
    bool has_debug_info() const { return has_debug_info_; }
    // .symtab and .dynsym merged, defined symbols only, deduplicated by (name, value). One copy
    // for every ElfFile of equal symbols (base/interner.hpp): VMs of one build share it.
    const std::vector<ElfSymbol>& symbols() const { return *symbols_; }
    std::optional<ElfSymbol> find(const std::string& name) const;
    // Virtual address of the first PT_LOAD segment with file offset 0 (the load bias is
    // mapping start minus this).
    uint64_t first_load_vaddr() const { return first_load_vaddr_; }
    const std::vector<ElfSegment>& segments() const { return segments_; }
    // This file's symbols with those of its separate debug file (`debug`, found by this file's
    // build-id): a stripped file's local symbols are only there. A debug file's code sections
    // are NOBITS, so each of its symbols takes its file offset from this file's segments; a
    // function outside them is left out.
    void adopt_symbols(const ElfFile& debug);
    // A symbol found some other way (target/vm_globals.hpp), at link-time address `value`; its
    // file offset from this file's segments. False when no segment of the file holds it.
    bool add_symbol(const std::string& name, uint64_t value, uint64_t size, bool is_func);
    // e_machine (EM_X86_64, EM_AARCH64, ...) and its name for messages.
    unsigned machine() const { return machine_; }
    std::string machine_name() const;

private:
    explicit ElfFile(const std::string& path) : path_(path) {}
    // Why the file cannot be read as ELF, "" when it was read.
    std::string read(int fd);
    void set_symbols(std::vector<ElfSymbol> symbols);
    std::string path_;
    std::string build_id_;
    bool has_debug_info_ = false;
    std::shared_ptr<const std::vector<ElfSymbol>> symbols_;
    uint64_t first_load_vaddr_ = 0;
    std::vector<ElfSegment> segments_;
    unsigned machine_ = 0;
};

}  // namespace bb
