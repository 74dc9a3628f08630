// The term printer: terms as Erlang's ~p and Elixir's inspect/1 write them.
#include "inspect/terms.hpp"

#include "base/text.hpp"
#include "inspect/term_words.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstring>
#include <vector>

namespace bb::term {

namespace {

using namespace detail;

bool is_reserved_word(std::string_view s) {
    static constexpr std::array<std::string_view, 29> words{"after",   "and",   "andalso", "band", "begin", "bnot",
                                                            "bor",     "bsl",   "bsr",     "bxor", "case",  "catch",
                                                            "cond",    "div",   "else",    "end",  "fun",   "if",
                                                            "let",     "maybe", "not",     "of",   "or",    "orelse",
                                                            "receive", "rem",   "try",     "when", "xor"};
    return std::find(words.begin(), words.end(), s) != words.end();
}

// A float as Erlang's ~p prints it: the shortest digits that read back (float_to_list(F,
// [short])), in fixed notation for exponents -4 to 20, else as 1.5e-7.
// "" for an infinity or a NaN, which no Erlang float is (memory that is not a float).
std::string float_text(double d) {
    if (!std::isfinite(d)) return "";
    char buf[64];
    auto [end, ec] = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
    if (ec != std::errc()) return "";
    std::string s(buf, end);
    auto e = s.find('e');
    if (e == std::string::npos) return "";
    int exp = 0;
    std::from_chars(s.data() + e + 1 + (s[e + 1] == '+'), s.data() + s.size(), exp);
    std::string mant = s.substr(0, e);
    bool neg = mant[0] == '-';
    if (neg) mant.erase(0, 1);
    std::string digits;
    for (char c : mant)
        if (c != '.') digits += c;
    std::string out;
    if (exp >= -4 && exp < 21) {
        if (exp < 0) {
            out = "0." + std::string(-exp - 1, '0') + digits;
        } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
            out = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
        } else {
            out = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
        }
    } else {
        out = digits.substr(0, 1) + "." + (digits.size() > 1 ? digits.substr(1) : "0") + "e" + std::to_string(exp);
    }
    return neg ? "-" + out : out;
}

// A bignum's digits (little-endian 64-bit words) in decimal.
std::string bignum_text(std::vector<uint64_t> digits, bool negative) {
    std::string out;
    while (!digits.empty() && digits.back() == 0) digits.pop_back();
    while (!digits.empty()) {
        constexpr uint64_t kChunk = 10'000'000'000'000'000'000ull;  // 10^19
        unsigned __int128 rem = 0;
        for (size_t i = digits.size(); i-- > 0;) {
            unsigned __int128 cur = (rem << 64) | digits[i];
            digits[i] = static_cast<uint64_t>(cur / kChunk);
            rem = cur % kChunk;
        }
        while (!digits.empty() && digits.back() == 0) digits.pop_back();
        std::string part = std::to_string(static_cast<uint64_t>(rem));
        if (!digits.empty()) part.insert(0, 19 - part.size(), '0');
        out.insert(0, part);
    }
    if (out.empty()) out = "0";
    return negative ? "-" + out : out;
}

class TermPrinter {
public:
    TermPrinter(const TermSource& src, const Limits& limits)
        : src_(src),
          limits_(limits),
          r_(src, limits.max_reads),
          elixir_(limits.syntax == Syntax::elixir),
          sep_(elixir_ ? ", " : ",") {}

    std::optional<std::string> print(uint64_t t) {
        term(t, limits_.depth, 0);
        if (bad_) return std::nullopt;
        if (out_.size() > limits_.max_chars) out_ = out_.substr(0, limits_.max_chars) + "...";
        else if (r_.exhausted()) out_ += "...";  // cut short by the read budget, not malformed
        return out_;
    }

private:
    // Nesting kept to this whatever the depth asked for: the printer recurses.
    static constexpr int kMaxNesting = 100;

    // Nothing more to print: malformed, as wide as allowed, or out of reads.
    bool full() const { return out_.size() > limits_.max_chars || r_.exhausted(); }
    std::optional<uint64_t> word(uint64_t addr) {
        auto w = r_.word(addr);
        if (!w && !r_.exhausted()) bad_ = true;
        return w;
    }

    // `d`: the ~P depth left (negative: none); `nest`: how deep the recursion is.
    void term(uint64_t t, int d, int nest) {
        if (bad_ || full()) return;
        if (d == 0 || nest > kMaxNesting) {
            out_ += "...";
        } else if (is_atom(t)) {
            auto text = src_.atom_text(t);
            if (!text) bad_ = true;
            else out_ += elixir_ ? elixir_atom(*text) : printed_atom(*text);
        } else if (is_small(t)) {
            out_ += std::to_string(small_value(t));
        } else if (is_local_pid(t)) {
            out_ += (elixir_ ? "#PID" : "") + src_.pid_text(t);
        } else if (is_local_port(t)) {
            out_ += fmt::format("#Port<0.{}>", t >> 4);
        } else if (t == kNil) {
            out_ += "[]";
        } else if (is_list(t)) {
            list(t, d, nest);
        } else if (is_boxed(t)) {
            boxed(t - 2, d, nest);
        } else {
            bad_ = true;  // a header or a catch is not a term
        }
    }

    void list(uint64_t t, int d, int nest) {
        if (d == 1) {
            out_ += "[...]";
            return;
        }
        // A printable list is printed as a string, as ~p does (Elixir: a charlist, ~c"...").
        if (auto s = string(t)) {
            out_ += elixir_ ? "~c" + *s : *s;
            return;
        }
        // Elixir writes a list of {atom, Value} as keywords: [timeout: 5000, name: :x].
        const bool keywords = elixir_ && keyword_list(t);
        out_ += '[';
        int i = 0;
        for (; is_list(t) && !bad_ && !full(); i++) {
            auto head = word(t - 1), tail = word(t + 7);
            if (!head || !tail) return;
            if (i) out_ += sep_;
            int left = d < 0 ? -1 : d - 1 - i;
            if (d > 0 && i > 0 && d - i <= 1) {
                if (!elixir_) out_.back() = '|';  // "[a,b|...]" as ~P writes it, "[a, b, ...]" as inspect
                out_ += "...]";
                return;
            }
            if (keywords) {
                auto k = word(*head + 6), v = word(*head + 14);  // {Key, Value}: header, Key, Value
                if (!k || !v) return;
                keyword_key(*k);
                term(*v, left, nest + 1);
            } else {
                term(*head, left, nest + 1);
            }
            t = *tail;
        }
        if (t != kNil && !bad_ && !full()) {
            out_ += elixir_ ? " | " : "|";
            term(t, d < 0 ? -1 : std::max(d - i, 1), nest + 1);
        }
        out_ += ']';
    }

    // "..." if `t` is a proper list of character codes 32 to 126 (up to max_chars of them).
    std::optional<std::string> string(uint64_t t) {
        std::string s = "\"";
        Reader probe(src_, static_cast<int64_t>(std::min<uint64_t>(2 * limits_.max_chars + 4, 1u << 20)));
        while (is_list(t)) {
            auto head = probe.word(t - 1), tail = probe.word(t + 7);
            if (!head || !tail || !is_small(*head) || small_value(*head) < 32 || small_value(*head) > 126)
                return std::nullopt;
            char ch = static_cast<char>(small_value(*head));
            if (ch == '"' || ch == '\\') s += '\\';
            s += ch;
            t = *tail;
            if (s.size() > limits_.max_chars) return s + "...";  // long enough to be cut anyway
        }
        if (t != kNil) return std::nullopt;
        return s + '"';
    }

    void tuple(uint64_t p, uint64_t arity, int d, int nest) {
        if (d == 1 && arity) {
            out_ += "{...}";
            return;
        }
        out_ += '{';
        for (uint64_t i = 0; i < arity && !bad_ && !full(); i++) {
            if (i) out_ += sep_;
            if (d > 0 && i > 0 && d - static_cast<int>(i) <= 1) {
                out_ += "...";
                break;
            }
            auto e = word(p + 8 * (i + 1));
            if (!e) return;
            term(*e, d < 0 ? -1 : d - 1 - static_cast<int>(i), nest + 1);
        }
        out_ += '}';
    }

    // An OTP 29 native record (EEP 79) as ~p writes it, #Module:Name{Field = Value,...}, fields
    // in their definition's order (erl_record.h). Its second word points to its definition, a
    // tuple-like ErtsRecordDefinition (an arity header; field_order, hash, module, name,
    // is_exported, then the keys sorted by atom index), whose field_order tuple gives each
    // field's place among those keys, and among the record's values (after the definition).
    void record(uint64_t p, uint64_t arity, int d, int nest) {
        auto def = word(p + 8);
        if (!def) return;
        const uint64_t n = arity ? arity - 1 : 0, dp = *def - 2;
        auto dhdr = word(dp), order = word(dp + 8), mod = word(dp + 24), name = word(dp + 32);
        if (!dhdr || !order || !mod || !name) return;
        if (!arity || !is_boxed(*def) || *dhdr != tuple_header(5 + n) || !is_atom(*mod) || !is_atom(*name) ||
            (n && (!is_boxed(*order) || word(*order - 2) != tuple_header(n)))) {
            bad_ = true;
            return;
        }
        out_ += '#';
        term(*mod, -1, nest + 1);
        out_ += ':';
        term(*name, -1, nest + 1);
        out_ += '{';
        for (uint64_t i = 0; i < n && !bad_ && !full(); i++) {
            if (i) out_ += sep_;
            if (d > 0 && d - static_cast<int>(i) <= 1) {
                out_ += "...";
                break;
            }
            auto at = word(*order - 2 + 8 * (i + 1));
            if (!at) return;
            if (!is_small(*at) || small_value(*at) < 0 || static_cast<uint64_t>(small_value(*at)) >= n) {
                bad_ = true;
                return;
            }
            auto key = word(dp + 48 + 8 * small_value(*at)), value = word(p + 16 + 8 * small_value(*at));
            if (!key || !value) return;
            if (!is_atom(*key)) {
                bad_ = true;
                return;
            }
            term(*key, -1, nest + 1);
            out_ += " = ";
            term(*value, d < 0 ? -1 : d - 1 - static_cast<int>(i), nest + 1);
        }
        out_ += '}';
    }

    // A map's pairs in the order it keeps them (a flat map's keys are sorted, as ~p shows
    // them; a hash map's are in hash order).
    void map(uint64_t p, uint64_t hdr, int d, int nest) {
        std::vector<std::pair<uint64_t, uint64_t>> pairs;
        if (!map_pairs(p, hdr, pairs, 0)) {
            bad_ = !r_.exhausted();
            return;
        }
        const char* open = elixir_ ? "%{" : "#{";
        if (d == 1 && !pairs.empty()) {
            out_ += open;
            out_ += "...}";
            return;
        }
        // Elixir: a struct as %Module{field: value} (its __struct__ key names it), and atom
        // keys as `key: value` when every key is an atom.
        bool atom_keys = elixir_ &&
                         std::all_of(pairs.begin(), pairs.end(), [](const auto& kv) { return is_atom(kv.first); });
        std::string structure;
        if (atom_keys)
            for (auto it = pairs.begin(); it != pairs.end(); ++it)
                if (src_.atom_text(it->first) == "__struct__" && is_atom(it->second)) {
                    if (auto m = src_.atom_text(it->second)) structure = elixir_atom(*m);
                    pairs.erase(it);
                    break;
                }
        out_ += structure.empty() ? open : "%" + structure + "{";
        for (size_t i = 0; i < pairs.size() && !bad_ && !full(); i++) {
            if (i) out_ += sep_;
            if (d > 0 && i > 0 && d - static_cast<int>(i) <= 1) {
                out_ += "...";
                break;
            }
            int left = d < 0 ? -1 : d - 1 - static_cast<int>(i);
            if (atom_keys) {
                keyword_key(pairs[i].first);
            } else {
                term(pairs[i].first, left, nest + 1);
                out_ += " => ";
            }
            term(pairs[i].second, left, nest + 1);
        }
        out_ += '}';
    }

    // Whether every element of the proper list at t is a {atom, Value} pair (a bounded probe).
    bool keyword_list(uint64_t t) {
        Reader probe(src_, 4096);
        int n = 0;
        for (; is_list(t); n++) {
            auto head = probe.word(t - 1), tail = probe.word(t + 7);
            if (!head || !tail || !is_boxed(*head)) return false;
            auto hdr = probe.word(*head - 2), key = probe.word(*head + 6);
            if (!hdr || *hdr != tuple_header(2) || !key || !is_atom(*key)) return false;
            t = *tail;
        }
        return t == kNil && n > 0;
    }

    // `key: ` as Elixir writes an atom key of a keyword list or a map.
    void keyword_key(uint64_t atom) {
        auto text = src_.atom_text(atom);
        if (!text) {
            bad_ = true;
            return;
        }
        std::string a = elixir_atom(*text);  // ":name" or ":\"with space\"", or an alias
        out_ += (a.starts_with(':') ? a.substr(1) : "\"" + escaped(*text, '"') + "\"") + ": ";
    }

    bool map_pairs(uint64_t p, uint64_t hdr, std::vector<std::pair<uint64_t, uint64_t>>& pairs, int level) {
        if (level > 16 || pairs.size() > 2 * limits_.max_chars) return pairs.size() > 2 * limits_.max_chars;
        if (map_kind(hdr) == kFlatmap) {
            auto size = word(p + 8), keys = word(p + 16);
            if (!size || !keys || *size > kMaxFlatmap || !is_boxed(*keys)) return false;
            for (uint64_t i = 0; i < *size; i++) {
                auto k = word(*keys - 2 + 8 * (i + 1)), v = word(p + 24 + 8 * i);
                if (!k || !v) return false;
                pairs.emplace_back(*k, *v);
            }
            return true;
        }
        uint64_t first = p + 8 * (1 + map_arity(hdr));
        for (uint64_t i = 0; i < map_children(hdr); i++) {
            auto child = word(first + 8 * i);
            if (!child) return false;
            if (is_list(*child)) {  // a leaf: [Key|Value]
                auto k = word(*child - 1), v = word(*child + 7);
                if (!k || !v) return false;
                pairs.emplace_back(*k, *v);
            } else if (is_boxed(*child)) {
                auto h = word(*child - 2);
                if (!h || (*h & 0x3c) != subtags(src_).map || !map_pairs(*child - 2, *h, pairs, level + 1))
                    return false;
            } else {
                return false;
            }
        }
        return true;
    }

    void binary(uint64_t p, uint64_t hdr) {
        auto b = binary_ref(r_, src_, p, hdr);
        if (!b) {
            bad_ = !r_.exhausted();
            return;
        }
        if (!b->whole || (b->off_heap && !src_.read_off_heap)) {
            out_ += "<<...>>";
            return;
        }
        std::vector<std::byte> data(std::min<uint64_t>(b->bytes, limits_.max_chars));
        if (!data.empty() && !(b->off_heap ? src_.read_off_heap : src_.read)(b->data, data)) {
            bad_ = true;
            return;
        }
        bool printable = std::all_of(data.begin(), data.end(),
                                     [](std::byte c) { return std::isprint(static_cast<unsigned char>(c)) != 0; });
        if (elixir_ && printable && !data.empty()) {  // a string: "text", #{ escaped
            out_ += '"';
            for (size_t i = 0; i < data.size(); i++) {
                char ch = static_cast<char>(data[i]);
                if (ch == '"' || ch == '\\' || (ch == '#' && i + 1 < data.size() && char(data[i + 1]) == '{'))
                    out_ += '\\';
                out_ += ch;
            }
            out_ += data.size() < b->bytes ? "\"..." : "\"";
            return;
        }
        out_ += "<<";
        if (printable && !data.empty()) {
            out_ += '"';
            for (std::byte c : data) {
                char ch = static_cast<char>(c);
                if (ch == '"' || ch == '\\') out_ += '\\';
                out_ += ch;
            }
            out_ += '"';
        } else {
            for (size_t i = 0; i < data.size(); i++) out_ += fmt::format("{}{}", i ? sep_ : "", int(data[i]));
        }
        if (data.size() < b->bytes) out_ += "...";
        out_ += ">>";
    }

    void boxed(uint64_t p, int d, int nest) {
        auto hdr = word(p);
        if (!hdr) return;
        if ((*hdr & 3) != 0) {
            bad_ = true;
            return;
        }
        const TermLayout& st = subtags(src_);
        uint64_t sub = *hdr & 0x3c, arity = *hdr >> 6;
        if (sub == kTuple) {
            tuple(p, arity, d, nest);
        } else if (sub == st.record) {
            record(p, arity, d, nest);
        } else if (sub == st.map) {
            map(p, *hdr, d, nest);
        } else if (sub == st.heap_bin || sub == st.sub_bin || (!src_.layout.bits_unified() && sub == st.refc_bin)) {
            binary(p, *hdr);
        } else if (sub == kFloat) {
            auto bits = word(p + 8);
            std::string f = bits ? float_text(std::bit_cast<double>(*bits)) : "";
            if (bits && f.empty()) bad_ = true;
            out_ += f;
        } else if (sub == kPosBig || sub == kNegBig) {
            if (arity == 0 || arity > kMaxThing) {
                bad_ = true;
                return;
            }
            // Digits past ~2 per printed character cannot show within the width.
            std::vector<uint64_t> digits(std::min<uint64_t>(arity, limits_.max_chars / 19 + 2));
            if (digits.size() < arity) {
                out_ += fmt::format("<integer of {} bits>", 64 * arity);
                return;
            }
            for (size_t i = 0; i < digits.size(); i++) {
                auto w = word(p + 8 * (i + 1));
                if (!w) return;
                digits[i] = *w;
            }
            out_ += bignum_text(std::move(digits), sub == kNegBig);
        } else if (sub == kRef) {
            // An ordinary local reference: its three 32-bit numbers, then ~0u (a magic one
            // holds a pointer there instead).
            auto a = word(p + 8), b = word(p + 16);
            if (!a || !b) return;
            const char* ref = elixir_ ? "#Reference" : "#Ref";
            if (arity == 2 && (*b >> 32) == 0xffffffffu)
                out_ += fmt::format("{}<0.{}.{}.{}>", ref, *b & 0xffffffffu, *a >> 32, *a & 0xffffffffu);
            else out_ += fmt::format("{}<...>", ref);
        } else if (sub == kFun) {
            out_ += elixir_ ? "#Function<...>" : "#Fun<...>";
        } else if (sub == kExternalPid) {
            out_ += "<external pid>";
        } else if (sub == kExternalPort) {
            out_ += "#Port<external>";
        } else if (sub == kExternalRef) {
            out_ += "#Ref<external>";
        } else {
            bad_ = true;  // a match state, a FunRef or a BinRef is not a term of its own
        }
    }

    const TermSource& src_;
    Limits limits_;
    Reader r_;
    bool elixir_;      // Syntax::elixir
    const char* sep_;  // between elements: "," (~p without line breaks) or ", " (inspect)
    std::string out_;
    bool bad_ = false;
};

}  // namespace

std::string printed_atom(std::string_view text) {
    bool bare = !text.empty() && std::islower(static_cast<unsigned char>(text[0])) && !is_reserved_word(text) &&
                std::all_of(text.begin(), text.end(),
                            [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '@'; });
    if (bare) return std::string(text);
    return "'" + escaped(text, '\'') + "'";  // control characters as io_lib writes them: '\e[2J'
}

std::string elixir_atom(std::string_view text) {
    if (text == "true" || text == "false" || text == "nil") return std::string(text);
    // An alias: 'Elixir.MyApp.Repo' is MyApp.Repo, each segment a capitalized identifier.
    auto identifier = [](std::string_view s, bool capital) {
        return !s.empty() &&
               (capital ? std::isupper(static_cast<unsigned char>(s[0]))
                        : std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_') &&
               std::all_of(s.begin(), s.end(),
                           [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '@'; });
    };
    if (text.starts_with("Elixir.") && text.size() > 7) {
        std::string_view rest = text.substr(7);
        bool alias = true;
        for (size_t at = 0; alias;) {
            size_t dot = rest.find('.', at);
            alias = identifier(rest.substr(at, dot == std::string_view::npos ? dot : dot - at), true);
            if (dot == std::string_view::npos) break;
            at = dot + 1;
        }
        if (alias) return std::string(rest);
    }
    // :name, :name? and :name! bare; anything else quoted.
    std::string_view stem = text;
    if (!stem.empty() && (stem.back() == '?' || stem.back() == '!')) stem.remove_suffix(1);
    if (identifier(stem, false)) return ":" + std::string(text);
    return ":\"" + escaped(text, '"') + "\"";
}

std::optional<std::string> text(const TermSource& src, uint64_t term, const Limits& limits) {
    return TermPrinter(src, limits).print(term);
}

}  // namespace bb::term
