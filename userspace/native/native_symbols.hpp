// Symbols of native code in the target (beam.smp, libc, NIF libraries) through libdwfl.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bb {

struct NativeSymbol {
    std::string name;    // "erts_garbage_collect_nobump"; empty when the module has no symbol there
    std::string module;  // basename: "beam.smp", "libc.so.6"
    uint64_t offset = 0; // addr - symbol start
    uint64_t size = 0;   // symbol size (0: unknown)
};

class NativeSymbols {
public:
    // Reports the modules mapped in `pid` now. Throws std::runtime_error on failure.
    explicit NativeSymbols(pid_t pid);
    ~NativeSymbols();
    NativeSymbols(const NativeSymbols&) = delete;
    NativeSymbols& operator=(const NativeSymbols&) = delete;

    // Re-reads the process's mappings (NIF libraries loaded since).
    void refresh();
    std::optional<NativeSymbol> lookup(uint64_t addr);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

// The kernel's function names, from /proc/kallsyms (read on first use; root sees addresses).
class KernelSymbols {
public:
    // "tcp_sendmsg", or nullopt when the address is in no function this reader knows.
    std::optional<std::string> lookup(uint64_t addr);
    // Why names are unavailable ("" when they are).
    const std::string& unavailable() { load(); return unavailable_; }

private:
    void load();
    bool loaded_ = false;
    std::string unavailable_;
    std::vector<std::pair<uint64_t, std::string>> syms_;  // sorted by address
};

}  // namespace bb
