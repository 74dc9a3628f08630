// libFuzzer target: the term printer and sizer (terms.hpp), whose input is the target VM's memory. The
// input is that memory, at a fixed address; its first word is the term to print.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "inspect/terms.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    constexpr uint64_t kBase = 0x10000;
    if (size < 8) return 0;
    bb::term::TermSource src;
    src.read = [&](uint64_t addr, std::span<std::byte> dst) {
        if (addr < kBase || addr - kBase > size || dst.size() > size - (addr - kBase)) return false;
        if (dst.empty()) return true;
        std::memcpy(dst.data(), data + (addr - kBase), dst.size());
        return true;
    };
    src.atom_text = [](uint64_t atom) -> std::optional<std::string> {
        if (bb::term::atom_index(atom) > 300) return std::nullopt;
        return std::string(bb::term::atom_index(atom) % 40, 'a');
    };
    src.pid_text = [](uint64_t) { return std::string("<0.1.0>"); };
    src.layout = (data[0] & 0x80) ? bb::kTerms27 : bb::kTerms25;
    uint64_t term;
    std::memcpy(&term, data, 8);
    src.read_off_heap = src.read;
    bb::term::Limits limits{.max_chars = 80, .depth = static_cast<int>(data[1] % 10) - 1, .max_reads = 4096};
    if (auto t = bb::term::text(src, term, limits); t && t->size() > 83) __builtin_trap();  // the cap holds
    bb::term::flat_size(src, term, 100'000);
    return 0;
}
