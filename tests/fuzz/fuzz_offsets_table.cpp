// libFuzzer target: the offsets table parser (offsets.hpp), which reads --offsets FILE. A table
// that parses must format back to one that parses to the same values.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "target/offsets.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    auto o = bb::parse_table(text);
    if (o) {
        auto back = bb::parse_table(bb::format_table(*o));
        if (!back || !(*back == *o)) __builtin_trap();
    } else if (o.error().empty() || o.error().find('\n') != std::string::npos) {
        __builtin_trap();  // every refusal says why, in one line
    }
    return 0;
}
