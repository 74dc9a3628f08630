// Symbols of native code in the target (beam.smp, libc, NIF libraries) through libdwfl.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "target/proc_maps.hpp"

namespace bb {

struct NativeSymbol {
    std::string name;     // "erts_garbage_collect_nobump"; empty when the module has no symbol there
    std::string module;   // basename: "beam.smp", "libc.so.6"
    uint64_t offset = 0;  // addr - symbol start
    uint64_t size = 0;    // symbol size (0: unknown)
};

struct FileSymbols;  // native_symbols.cpp

// The modules a process maps; each file's symbols are read once for every NativeSymbols of a
// process that maps the same inode (every VM of a host on one build shares beam.smp's and libc's).
class NativeSymbols {
public:
    // Reads the modules mapped in `pid` now. Throws std::runtime_error on failure.
    explicit NativeSymbols(pid_t pid);
    ~NativeSymbols();
    NativeSymbols(const NativeSymbols&) = delete;
    NativeSymbols& operator=(const NativeSymbols&) = delete;

    // Re-reads the process's mappings (NIF libraries loaded since).
    void refresh();
    // The module and function at `addr`; nullopt when no module maps it.
    std::optional<NativeSymbol> lookup(uint64_t addr);
    // Files whose symbols are held now, by every NativeSymbols of this process (for tests).
    static size_t files_held();

private:
    // A module of the process: each run of mappings of one file (by device and inode) that
    // starts at its offset 0, as libdwfl's own /proc/PID/maps reader groups them, a deleted
    // library included; and the vDSO. Its file's symbols are found at its first lookup.
    struct Module {
        uint64_t end = 0;
        Mapping first;     // its mapping of file offset 0
        std::string name;  // basename, as the process maps it (" (deleted)" cut off)
        bool opened = false;
        std::shared_ptr<FileSymbols> syms;  // null: none found
    };
    void open(Module& m);
    pid_t pid_;
    std::map<uint64_t, Module> modules_;  // by start
};

// The kernel's function names, from /proc/kallsyms (read on first use; root sees addresses).
class KernelSymbols {
public:
    // "tcp_sendmsg", or nullopt when the address is in no function this reader knows.
    std::optional<std::string> lookup(uint64_t addr);
    // Why names are unavailable ("" when they are).
    const std::string& unavailable() {
        load();
        return unavailable_;
    }

private:
    void load();
    bool loaded_ = false;
    std::string unavailable_;
    std::vector<std::pair<uint64_t, std::string>> syms_;  // sorted by address
};

}  // namespace bb
