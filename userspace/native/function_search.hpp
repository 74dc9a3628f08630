// Native functions of the target found by name, for probes (blame, -e alloc's GC entries).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include <memory>

#include "target/elf_file.hpp"
#include "target/target_file.hpp"
#include "target/vm.hpp"

namespace bb {

struct NativeMatch {
    ElfSymbol sym;
    std::string file;    // as mapped in the target
    uint64_t start = 0;  // runtime address
    // The library, open (null: the executable, Vm::exe_file()); a probe is placed through it.
    std::shared_ptr<const TargetFile> opened;
};

// FUNC in beam.smp first, then in the libraries the VM has mapped (libc, NIF libraries); as a
// prefix unless `exact`. UserError naming the closest names when none matches.
std::vector<NativeMatch> resolve_functions(const Vm& vm, const std::string& func, bool exact);

}  // namespace bb
