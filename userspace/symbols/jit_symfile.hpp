// What the VM writes about its JIT code for debuggers: a "symfile" per module (its code's
// functions and lines) and one for the emulator, each the VM's own packed struct debug_info
// (symbols/jit_code.hpp finds them through the GDB JIT interface).
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace bb {

// Symbols are held as offsets from their module's base, not as addresses: VMs of one release
// load the same module at other addresses, and one copy serves them all (share_module(),
// symbols/jit_code.hpp).
struct JitLine {
    uint32_t start = 0;  // offset from the module's base where this line's code starts
    uint32_t line = 0;
    uint32_t file = 0;  // index into its module's `files`: a module's lines name one or two
                        // files, tens of thousands of times (a string each was 3 MiB a VM)
    bool operator==(const JitLine&) const = default;
};

struct JitRange {
    uint32_t start = 0, end = 0;  // offsets from the module's base, [start, end)
    std::string name;             // "lists:keyfind/3"; pseudo-range suffixes stripped
    bool prologue = false;        // the VM named it NAME-CodeInfoPrologue (a perf map keeps that)
    std::vector<JitLine> lines;   // sorted by start
    bool operator==(const JitRange&) const = default;
};

struct JitModule {
    std::string name;  // "lists"
    uint32_t code_size = 0;
    std::vector<JitRange> ranges;    // sorted by start, non-overlapping
    std::vector<std::string> files;  // the file names its lines give, each once
    bool operator==(const JitModule&) const = default;
};

// What a module's symfile says: where its code is, and its symbols.
struct JitSymfile {
    uint64_t base = 0;
    JitModule module;
};

struct JitEmulator {
    int frame_layout = 0;      // 0: return address only, 1: frame pointer + return address
    uint64_t normal_exit = 0;  // the stub at the bottom of every Erlang stack
};

// The symfile's kind says it is the emulator's (else it is a module's, or garbage).
bool is_emulator_symfile(std::span<const std::byte> bytes);
// Pure parsers of one symfile's bytes; they survive garbage (a Fail saying why).
Result<JitSymfile> parse_module_symfile(std::span<const std::byte> bytes);
Result<JitEmulator> parse_emulator_symfile(std::span<const std::byte> bytes);

}  // namespace bb
