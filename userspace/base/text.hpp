// Text for people: sizes.
#pragma once
#include <cstdint>
#include <string>

namespace bb {

// "512 B", "37 KiB", "12 MiB": whole units, up to 10 of the next.
std::string human_bytes(uint64_t bytes);

}  // namespace bb
