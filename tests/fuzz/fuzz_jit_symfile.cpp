// libFuzzer target: the GDB JIT symfile parsers (jit_symfile.hpp), whose input is the target VM's
// memory. The first byte picks the record kind, as the symfile header does.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "symbols/jit_symfile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    if (auto s = bb::parse_module_symfile(bytes)) {
        // What the index relies on: ranges sorted, inside the module's code (which does not
        // wrap), lines inside their module's code, each naming a file kept.
        const bb::JitModule& m = s->module;
        if (s->base + m.code_size < s->base) __builtin_trap();
        uint64_t last = 0;
        for (const auto& r : m.ranges) {
            if (r.start < last || r.end <= r.start || r.end > m.code_size) __builtin_trap();
            last = r.end;
            for (const auto& l : r.lines)
                if (l.start > m.code_size || l.file >= m.files.size()) __builtin_trap();
        }
    }
    (void)bb::parse_emulator_symfile(bytes);
    return 0;
}
