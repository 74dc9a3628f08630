// The struct offsets of a VM build read from its DWARF (target/offsets.hpp has what they are,
// and the tables they are shipped as).
#pragma once
#include <string>

#include "base/error.hpp"
#include "target/offsets.hpp"

namespace bb {

// Reads the offsets from the DWARF of `elf_path` (a beam.smp with debug info, or its separate
// debug file). Fails with a one-line reason when a struct or member is missing.
// otp_release and features are left empty: the caller knows the build (release.hpp).
Result<VmOffsets> offsets_from_dwarf(const std::string& elf_path);

}  // namespace bb
