// Native functions of the target found by name, for probes (blame, -e alloc's GC entries).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "target/elf_file.hpp"
#include "target/vm.hpp"

namespace bb {

struct NativeMatch {
    ElfSymbol sym;
    std::string file;    // as mapped in the target
    uint64_t start = 0;  // runtime address
};

// FUNC in beam.smp first, then in the libraries the VM has mapped (libc, NIF libraries); as a
// prefix unless `exact`. UserError naming the closest names when none matches.
std::vector<NativeMatch> resolve_functions(const Vm& vm, const std::string& func, bool exact);

}  // namespace bb
