#include "base/text.hpp"

#include <fmt/format.h>

namespace bb {

std::string human_bytes(uint64_t b) {
    if (b < 10 * 1024) return fmt::format("{} B", b);
    if (b < 10 * 1024 * 1024) return fmt::format("{} KiB", b / 1024);
    return fmt::format("{} MiB", b / (1024 * 1024));
}

}  // namespace bb
