// libFuzzer target: the GDB JIT symfile parsers (jit_code.hpp), whose input is the target VM's
// memory. The first byte picks the record kind, as the symfile header does.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "symbols/jit_code.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
    if (auto m = bb::parse_module_symfile(bytes)) {
        // What the index relies on: ranges sorted, inside the module, lines inside their range.
        uint64_t last = 0;
        for (const auto& r : m->ranges) {
            if (r.start < last || r.end < r.start) __builtin_trap();
            last = r.end;
            for (const auto& l : r.lines)
                if (l.file >= m->files.size()) __builtin_trap();  // every line names a file kept
        }
    }
    (void)bb::parse_emulator_symfile(bytes);
    return 0;
}
