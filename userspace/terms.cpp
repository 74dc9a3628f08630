#include "terms.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <vector>

namespace bb::term {

namespace {

bool is_reserved_word(std::string_view s) {
    static constexpr std::array<std::string_view, 29> words{
        "after", "and", "andalso", "band", "begin", "bnot", "bor", "bsl", "bsr", "bxor",
        "case", "catch", "cond", "div", "else", "end", "fun", "if", "let", "maybe",
        "not", "of", "or", "orelse", "receive", "rem", "try", "when", "xor"};
    return std::find(words.begin(), words.end(), s) != words.end();
}

class TermPrinter {
public:
    TermPrinter(const TermSource& src, size_t max_chars) : src_(src), max_chars_(max_chars) {}

    std::optional<std::string> print(uint64_t t) {
        term(t, 0);
        if (bad_) return std::nullopt;
        if (out_.size() > max_chars_) out_ = out_.substr(0, max_chars_) + "...";
        return out_;
    }

private:
    static constexpr int kMaxDepth = 6;
    static constexpr int kMaxReads = 256;
    static constexpr size_t kMaxElements = 64;

    std::optional<uint64_t> word(uint64_t addr) {
        uint64_t w;
        if (++reads_ > kMaxReads || !src_.read(addr, std::as_writable_bytes(std::span(&w, 1)))) return std::nullopt;
        return w;
    }
    bool full() const { return out_.size() > max_chars_; }

    void term(uint64_t t, int depth) {
        if (bad_ || full()) return;
        if (depth > kMaxDepth) {
            out_ += "...";
        } else if (is_atom(t)) {
            auto text = src_.atom_text(t);
            if (!text) bad_ = true;
            else out_ += printed_atom(*text);
        } else if (is_small(t)) {
            out_ += std::to_string(small_value(t));
        } else if (is_local_pid(t)) {
            out_ += src_.pid_text(t);
        } else if (t == kNil) {
            out_ += "[]";
        } else if (is_list(t)) {
            list(t, depth);
        } else if (is_boxed(t)) {
            boxed(t - 2, depth);
        } else {
            out_ += "...";  // ports, references, catches: nothing a name needs
        }
    }

    void list(uint64_t t, int depth) {
        std::vector<uint64_t> items;
        while (is_list(t) && items.size() < kMaxElements) {
            auto head = word(t - 1), tail = word(t + 7);
            if (!head || !tail) {
                bad_ = true;
                return;
            }
            items.push_back(*head);
            t = *tail;
        }
        bool more = is_list(t);
        bool text = (more || t == kNil) && std::all_of(items.begin(), items.end(), [](uint64_t c) {
            return is_small(c) && small_value(c) >= 32 && small_value(c) < 127;
        });
        if (text) {
            out_ += '"';
            for (uint64_t c : items) {
                char ch = static_cast<char>(small_value(c));
                if (ch == '"' || ch == '\\') out_ += '\\';
                out_ += ch;
            }
            out_ += more ? "\"..." : "\"";
            return;
        }
        out_ += '[';
        for (size_t i = 0; i < items.size() && !full(); i++) {
            if (i) out_ += ',';
            term(items[i], depth + 1);
        }
        if (more) {
            out_ += "|...";
        } else if (t != kNil) {
            out_ += '|';
            term(t, depth + 1);
        }
        out_ += ']';
    }

    void boxed(uint64_t p, int depth) {
        auto hdr = word(p);
        if (!hdr || (*hdr & 3) != 0) {
            bad_ = true;
            return;
        }
        uint64_t subtag = *hdr & 0x3c;
        if (subtag == 0) {  // a tuple
            uint64_t arity = *hdr >> 6;
            out_ += '{';
            for (uint64_t i = 0; i < arity && !full(); i++) {
                if (i) out_ += ',';
                if (i == kMaxElements) {
                    out_ += "...";
                    break;
                }
                auto e = word(p + 8 * (i + 1));
                if (!e) {
                    bad_ = true;
                    return;
                }
                term(*e, depth + 1);
            }
            out_ += '}';
            return;
        }
        // A binary on the heap or in the literal area: ErlHeapBin (subtag 0x9, size in bytes)
        // before OTP 27, ErlHeapBits (subtag 0x8, size in bits) from 27 on.
        const bool heap_bits = src_.heap_bits;
        if (subtag == (heap_bits ? 0x20u : 0x24u)) {
            auto size = word(p + 8);
            if (!size) {
                bad_ = true;
                return;
            }
            uint64_t bytes = heap_bits ? *size / 8 : *size;
            if (heap_bits && *size % 8) {
                out_ += "<<...>>";
                return;
            }
            std::vector<std::byte> data(std::min<uint64_t>(bytes, max_chars_));
            if (!data.empty() && !src_.read(p + 16, data)) {
                bad_ = true;
                return;
            }
            bool printable = std::all_of(data.begin(), data.end(), [](std::byte b) {
                return std::isprint(static_cast<unsigned char>(b)) != 0;
            });
            out_ += "<<";
            if (printable) {
                out_ += '"';
                for (std::byte b : data) {
                    char ch = static_cast<char>(b);
                    if (ch == '"' || ch == '\\') out_ += '\\';
                    out_ += ch;
                }
                out_ += '"';
            } else {
                for (size_t i = 0; i < data.size(); i++) out_ += fmt::format("{}{}", i ? "," : "", int(data[i]));
            }
            if (data.size() < bytes) out_ += ",...";
            out_ += ">>";
            return;
        }
        out_ += "...";  // funs, maps, bignums, references, off-heap binaries
    }

    const TermSource& src_;
    size_t max_chars_;
    std::string out_;
    int reads_ = 0;
    bool bad_ = false;
};

}  // namespace

std::string printed_atom(std::string_view text) {
    bool bare = !text.empty() && std::islower(static_cast<unsigned char>(text[0])) && !is_reserved_word(text) &&
                std::all_of(text.begin(), text.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '@';
                });
    if (bare) return std::string(text);
    std::string out = "'";
    for (char c : text) {
        if (c == '\'' || c == '\\') out += '\\';
        out += c;
    }
    return out + "'";
}

std::optional<std::string> text(const TermSource& src, uint64_t term, size_t max_chars) {
    return TermPrinter(src, max_chars).print(term);
}

}  // namespace bb::term
