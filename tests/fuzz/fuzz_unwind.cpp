// libFuzzer target: the .eh_frame compiler (unwind_table.hpp) on arbitrary bytes, as it would
// meet a corrupt or hostile library mapped into the VM. Its rows must stay sorted: the BPF
// walker's binary search relies on it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "native/unwind_table.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    bb::UnwindTable t = bb::compile_unwind_table(data, size);
    for (size_t i = 1; i < t.rows.size(); i++)
        if (t.rows[i - 1].pc >= t.rows[i].pc) std::abort();
    for (const auto& f : t.functions)
        if (f.first >= f.second) std::abort();
    return 0;
}
