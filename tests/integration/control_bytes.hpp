// What the hostile tests look for in every output: a byte a terminal acts on.
#pragma once
#include <string>

namespace bbt {

// "" when `s` holds no C0 control but the newline, no DEL, no C1 control as UTF-8 (C2 80..C2 9F)
// and no bidirectional override (U+202A-U+202E, U+2066-U+2069); else where the first one is.
inline std::string control_bytes_in(const std::string& s) {
    for (size_t i = 0; i < s.size(); i++) {
        auto c = static_cast<unsigned char>(s[i]);
        auto next = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0; };
        bool bad = (c < 0x20 && c != '\n') || c == 0x7f || (c == 0xc2 && next(1) >= 0x80 && next(1) < 0xa0) ||
                   (c == 0xe2 && next(1) == 0x80 && next(2) >= 0xaa && next(2) <= 0xae) ||
                   (c == 0xe2 && next(1) == 0x81 && next(2) >= 0xa6 && next(2) <= 0xa9);
        if (bad) {
            size_t from = i < 40 ? 0 : i - 40;
            return "byte " + std::to_string(c) + " at " + std::to_string(i) + " after \"" + s.substr(from, i - from) +
                   "\"";
        }
    }
    return "";
}

}  // namespace bbt
