#include "base/text.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace bb {

size_t output_columns() {
    if (const char* env = std::getenv("COLUMNS")) {
        std::string_view v(env);
        size_t n = 0;
        auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (ec == std::errc() && end == v.data() + v.size() && n >= 20 && n <= 10000) return n;
    }
    winsize ws{};
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20) return ws.ws_col;
    return 0;
}

std::string fit(std::string_view s, size_t width) {
    if (width == 0 || s.size() <= width) return std::string(s);
    return width <= 3 ? std::string(s.substr(0, width)) : std::string(s.substr(0, width - 3)) + "...";
}

std::string wrap_words(std::string_view text, size_t columns) {
    if (columns == 0) return std::string(text);
    std::string out;
    for (size_t at = 0; at <= text.size();) {
        const size_t nl = std::min(text.find('\n', at), text.size());
        std::string_view line = text.substr(at, nl - at);
        size_t width = 0;  // of the output line being filled
        for (size_t w = 0; w < line.size();) {
            const size_t sp = std::min(line.find(' ', w), line.size());
            const std::string_view word = line.substr(w, sp - w);
            if (width > 0 && width + 1 + word.size() > columns) {
                out += '\n';
                width = 0;
            } else if (width > 0 || w > 0) {
                out += ' ';
                width++;
            }
            out += word;
            width += word.size();
            w = sp + 1;
        }
        if (nl < text.size()) out += '\n';
        at = nl + 1;
    }
    return out;
}

std::string human_bytes(uint64_t b) {
    if (b < 10 * 1024) return fmt::format("{} B", b);
    if (b < 10 * 1024 * 1024) return fmt::format("{} KiB", b / 1024);
    return fmt::format("{} MiB", b / (1024 * 1024));
}

std::string signed_bytes(int64_t b) { return (b < 0 ? "-" : "+") + human_bytes(b < 0 ? 0 - uint64_t(b) : uint64_t(b)); }

namespace {

// The code point at the start of `s` and its length in bytes; length 0 when `s` does not start
// with valid UTF-8 (RFC 3629: shortest form, no surrogates, at most U+10FFFF).
struct Decoded {
    uint32_t cp = 0;
    size_t len = 0;
};
Decoded decode(std::string_view s) {
    auto b = [&](size_t i) { return static_cast<uint8_t>(s[i]); };
    uint8_t c = b(0);
    if (c < 0x80) return {c, 1};
    size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
    if (len == 0 || c > 0xf4 || s.size() < len) return {};
    uint32_t cp = c & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((b(i) & 0xc0) != 0x80) return {};
        cp = cp << 6 | (b(i) & 0x3f);
    }
    static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < kMin[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return {};
    return {cp, len};
}

bool is_bidi_control(uint32_t cp) { return (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069); }

// Appends the escape of code point `cp` (io_lib's string_char/4) to `out`; false when it prints
// as itself.
bool escape_cp(uint32_t cp, std::string& out) {
    switch (cp) {
    case '\n': out += "\\n"; return true;
    case '\r': out += "\\r"; return true;
    case '\t': out += "\\t"; return true;
    case '\v': out += "\\v"; return true;
    case '\b': out += "\\b"; return true;
    case '\f': out += "\\f"; return true;
    case 0x1b: out += "\\e"; return true;
    case 0x7f: out += "\\d"; return true;
    default: break;
    }
    if (cp < 0x20 || (cp >= 0x80 && cp < 0xa0)) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\%03o", static_cast<unsigned>(cp));
        out += buf;
        return true;
    }
    if (is_bidi_control(cp)) {
        char buf[16];
        std::snprintf(buf, sizeof buf, "\\x{%X}", static_cast<unsigned>(cp));
        out += buf;
        return true;
    }
    return false;
}

// quote 0: printable() (quotes and backslashes left alone).
std::string escape(std::string_view s, char quote) {
    std::string out;
    out.reserve(s.size());
    while (!s.empty()) {
        Decoded d = decode(s);
        if (d.len == 0) {  // not UTF-8: the byte's value
            char buf[16];
            std::snprintf(buf, sizeof buf, "\\x{%02X}", static_cast<unsigned>(static_cast<uint8_t>(s[0])));
            out += buf;
            s.remove_prefix(1);
            continue;
        }
        if (quote && (d.cp == static_cast<uint8_t>(quote) || d.cp == '\\')) {
            out += '\\';
            out += static_cast<char>(d.cp);
        } else if (!escape_cp(d.cp, out)) {
            out.append(s.substr(0, d.len));
        }
        s.remove_prefix(d.len);
    }
    return out;
}

}  // namespace

bool has_control_byte(std::string_view s, bool tab_allowed) {
    return std::any_of(s.begin(), s.end(), [&](char c) {
        const auto u = static_cast<unsigned char>(c);
        return (u < 0x20 && !(tab_allowed && c == '\t')) || u == 0x7f;
    });
}

bool is_printable(std::string_view s) {
    std::string scratch;
    while (!s.empty()) {
        uint8_t c = static_cast<uint8_t>(s[0]);
        if (c >= 0x20 && c < 0x7f) {  // the common case: plain ASCII
            s.remove_prefix(1);
            continue;
        }
        Decoded d = decode(s);
        if (d.len == 0 || escape_cp(d.cp, scratch)) return false;
        s.remove_prefix(d.len);
    }
    return true;
}

std::string escaped(std::string_view bytes, char quote) { return escape(bytes, quote); }

std::string printable(std::string_view bytes) {
    if (is_printable(bytes)) return std::string(bytes);
    return escape(bytes, 0);
}

std::string json_text(const nlohmann::json& j, int indent) {
    return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace bb
