// libFuzzer target: reading the release and build features from a binary's bytes
// (release.hpp), and the pid parser of --process with both pid layouts.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "target/release.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::span<const char> bytes(reinterpret_cast<const char*>(data), size);
    if (auto b = bb::read_vm_build(bytes)) {
        if (b->erts_version.empty()) __builtin_trap();
        (void)b->describe();
    }
    std::string_view text(bytes.data(), bytes.size());
    const bb::PidPix pix{0xfffff, 0x7, 0x1ffff, 17, 3};
    for (const bb::PidLayout& l : {bb::PidLayout{28, 15, false}, bb::PidLayout{60, 28, true}})
        if (auto term = l.parse(text, pix)) {
            if (l.parse(l.format(*term, pix), pix) != term) __builtin_trap();  // round trip
        }
    return 0;
}
