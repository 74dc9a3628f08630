#include "inspect/terms.hpp"

#include "base/text.hpp"

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

bool is_reserved_word(std::string_view s) {
    static constexpr std::array<std::string_view, 29> words{
        "after", "and", "andalso", "band", "begin", "bnot", "bor", "bsl", "bsr", "bxor",
        "case", "catch", "cond", "div", "else", "end", "fun", "if", "let", "maybe",
        "not", "of", "or", "orelse", "receive", "rem", "try", "when", "xor"};
    return std::find(words.begin(), words.end(), s) != words.end();
}

constexpr uint64_t kTuple = 0x00, kPosBig = 0x08, kNegBig = 0x0c, kRef = 0x10, kFun = 0x14, kFloat = 0x18,
                   kExternalPid = 0x30, kExternalPort = 0x34, kExternalRef = 0x38;
// The subtags that moved between releases come from the release's TermLayout.
const TermLayout& subtags(const TermSource& s) { return s.layout; }

// Map headers (erl_term.h): the kind in bits 6-7, an arity in 8-15 (1 for a hash map's head,
// whose size word follows), the bitmap of a hash map node in 16-31.
constexpr uint64_t kFlatmap = 0;
uint64_t map_kind(uint64_t hdr) { return (hdr >> 6) & 3; }
uint64_t map_arity(uint64_t hdr) { return (hdr >> 8) & 0xff; }
uint64_t map_children(uint64_t hdr) { return std::popcount((hdr >> 16) & 0xffff); }
constexpr uint64_t kMaxFlatmap = 32;  // MAP_SMALL_MAP_LIMIT

constexpr uint64_t kMaxThing = 1u << 20;  // words in a bignum or binary header worth believing

// The words of a boxed term, read one at a time with a budget.
class Reader {
public:
    Reader(const TermSource& src, int64_t max_reads) : src_(src), left_(max_reads) {}
    std::optional<uint64_t> word(uint64_t addr) {
        uint64_t w;
        if (--left_ < 0 || !src_.read(addr, std::as_writable_bytes(std::span(&w, 1)))) return std::nullopt;
        return w;
    }
    bool exhausted() const { return left_ < 0; }
    int64_t used() const { return start_ - std::max<int64_t>(left_, 0); }

private:
    const TermSource& src_;
    int64_t left_, start_ = left_;
};

// A binary's bytes and where they are: on the heap (read through src.read) or off it.
struct BinaryRef {
    uint64_t data = 0;     // address of its first byte
    uint64_t bytes = 0;    // whole bytes
    bool whole = true;     // a whole number of bytes, starting on a byte
    bool off_heap = false;
};

// Resolves a binary of any kind (heap, refc, sub) to its bytes; nullopt if malformed.
std::optional<BinaryRef> binary_ref(Reader& r, const TermSource& src, uint64_t p, uint64_t hdr, int hops = 0) {
    const TermLayout& st = subtags(src);
    uint64_t sub = hdr & 0x3c;
    auto w = [&](int i) { return r.word(p + 8 * i); };
    if (sub == st.heap_bin) {
        auto size = w(1);
        if (!size) return std::nullopt;
        BinaryRef b{p + 16, src.layout.bits_unified() ? *size / 8 : *size, !src.layout.bits_unified() || *size % 8 == 0, false};
        if (b.bytes > 8 * (hdr >> 6)) return std::nullopt;  // more than the header holds
        return b;
    }
    if (!src.layout.bits_unified() && sub == st.refc_bin) {  // ProcBin: thing, size, next, val, bytes, flags
        auto size = w(1), bytes = w(4);
        if (!size || !bytes) return std::nullopt;
        return BinaryRef{*bytes, *size, true, true};
    }
    if (sub != st.sub_bin || hops > 0) return std::nullopt;
    if (!src.layout.bits_unified()) {  // ErlSubBin: thing, size, offs, bitsize/bitoffs/is_writable, orig
        auto size = w(1), offs = w(2), bits = w(3), orig = w(4);
        if (!size || !offs || !bits || !orig || !is_boxed(*orig)) return std::nullopt;
        auto ohdr = r.word(*orig - 2);
        if (!ohdr) return std::nullopt;
        auto real = binary_ref(r, src, *orig - 2, *ohdr, hops + 1);
        if (!real || *offs > real->bytes || *size > real->bytes - *offs) return std::nullopt;
        bool whole = (*bits & 0xffff) == 0;  // bitsize and bitoffs bytes
        return BinaryRef{real->data + *offs, *size, whole && real->whole, real->off_heap};
    }
    // ErlSubBits: thing, base_flags, start and end in bits, orig (a BinRef, or a heap bitstring
    // for a match context). The data starts at base + start / 8.
    auto base = w(1), start = w(2), end = w(3), orig = w(4);
    if (!base || !start || !end || !orig || *start > *end || !is_boxed(*orig)) return std::nullopt;
    auto ohdr = r.word(*orig - 2);
    if (!ohdr) return std::nullopt;
    bool off_heap = (*ohdr & 0x3c) == st.refc_bin;
    return BinaryRef{(*base & ~uint64_t{3}) + *start / 8, (*end - *start) / 8, (*start | *end) % 8 == 0, off_heap};
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
        : src_(src), limits_(limits), r_(src, limits.max_reads), elixir_(limits.syntax == Syntax::elixir),
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
        bool atom_keys = elixir_ && std::all_of(pairs.begin(), pairs.end(), [](const auto& kv) { return is_atom(kv.first); });
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
                if (!h || (*h & 0x3c) != subtags(src_).map || !map_pairs(*child - 2, *h, pairs, level + 1)) return false;
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
        bool printable = std::all_of(data.begin(), data.end(), [](std::byte c) {
            return std::isprint(static_cast<unsigned char>(c)) != 0;
        });
        if (elixir_ && printable && !data.empty()) {  // a string: "text", #{ escaped
            out_ += '"';
            for (size_t i = 0; i < data.size(); i++) {
                char ch = static_cast<char>(data[i]);
                if (ch == '"' || ch == '\\' || (ch == '#' && i + 1 < data.size() && char(data[i + 1]) == '{')) out_ += '\\';
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

// size_object() of copy.c, for both layouts, with an explicit stack and a cell budget.
// With a SizeMemo: distinct words (each cell once), or flat sizes with shared cells memoized.
class FlatSizer {
public:
    enum class Mode { flat, distinct };
    FlatSizer(const TermSource& src, uint64_t max_cells, SizeMemo* memo = nullptr, Mode mode = Mode::flat)
        : src_(src), r_(src, static_cast<int64_t>(std::min<uint64_t>(max_cells, INT64_MAX))), memo_(memo), mode_(mode) {}

    std::optional<Size> size(uint64_t t) {
        std::vector<uint64_t> todo{t};
        // Shared cells being sized: their size is what was added since, once the todo list is
        // back to the length it had when they were entered.
        struct Open {
            uint64_t cell;
            Size before;
            size_t todo_len;
        };
        std::vector<Open> opened;
        auto close = [&] {
            while (!opened.empty() && todo.size() == opened.back().todo_len) {
                const Open& o = opened.back();
                if (memo_->sizes.size() < memo_->max_remembered)
                    memo_->sizes[o.cell] = {size_.words - o.before.words, size_.off_heap_bytes - o.before.off_heap_bytes};
                memo_->open.erase(o.cell);
                opened.pop_back();
            }
        };
        bool ok = true;
        while (ok && !todo.empty()) {
            uint64_t obj = todo.back();
            todo.pop_back();
            if (memo_ && !is_immediate(obj)) {
                if (mode_ == Mode::distinct) {
                    if (!memo_->first_visit(obj)) {
                        memo_->shared.insert(obj);
                        continue;
                    }
                } else if (auto it = memo_->sizes.find(obj); it != memo_->sizes.end()) {
                    size_.words += it->second.words;
                    size_.off_heap_bytes += it->second.off_heap_bytes;
                    close();
                    continue;
                } else if (memo_->shared.count(obj)) {
                    if (!memo_->open.insert(obj).second) {
                        ok = false;  // inside itself
                        break;
                    }
                    opened.push_back({obj, size_, todo.size()});
                }
            }
            ok = one(obj, todo);
            if (memo_) close();
        }
        if (memo_) {
            memo_->reads_left -= r_.used();
            for (const Open& o : opened) memo_->open.erase(o.cell);
        }
        if (!ok) return std::nullopt;
        return size_;
    }

private:
    bool push(std::vector<uint64_t>& todo, uint64_t t) {
        if (is_list(t) || is_boxed(t)) todo.push_back(t);
        else if (!is_immediate(t)) return false;  // a header or a non-value inside a term
        return true;
    }

    bool one(uint64_t obj, std::vector<uint64_t>& todo) {
        if (is_immediate(obj)) return true;
        if (is_list(obj)) {
            auto head = r_.word(obj - 1), tail = r_.word(obj + 7);
            if (!head || !tail) return false;
            size_.words += 2;
            return push(todo, *head) && push(todo, *tail);
        }
        if (!is_boxed(obj)) return false;
        uint64_t p = obj - 2;
        auto hdr = r_.word(p);
        if (!hdr || (*hdr & 3) != 0) return false;
        const TermLayout& st = subtags(src_);
        uint64_t sub = *hdr & 0x3c, arity = *hdr >> 6;
        if (sub == kTuple) {
            if (arity > kMaxThing) return false;
            size_.words += arity ? arity + 1 : 0;  // the empty tuple is a shared literal
            for (uint64_t i = 1; i <= arity; i++) {
                auto e = r_.word(p + 8 * i);
                if (!e || !push(todo, *e)) return false;
            }
            return true;
        }
        if (sub == st.map) {
            uint64_t first, n;
            if (map_kind(*hdr) == kFlatmap) {
                auto size = r_.word(p + 8);
                if (!size || *size > kMaxFlatmap) return false;
                size_.words += *size + 3;
                first = p + 16;  // the keys tuple, then the values
                n = *size + 1;
            } else {
                n = map_children(*hdr);
                size_.words += 1 + n + map_arity(*hdr);
                first = p + 8 * (1 + map_arity(*hdr));
            }
            for (uint64_t i = 0; i < n; i++) {
                auto e = r_.word(first + 8 * i);
                if (!e || !push(todo, *e)) return false;
            }
            return true;
        }
        if (sub == kFun) {
            // OTP 27: ERL_FUN_SIZE (2) and the environment, its size in the header. Before:
            // the header's arity in words, then the creator and num_free free variables.
            uint64_t env, n;
            if (src_.layout.bits_unified()) {
                n = *hdr >> 16;
                size_.words += 2 + n;
                env = p + 16;
            } else {
                auto nf = r_.word(p + 24);
                if (!nf || arity > 8) return false;
                n = 1 + ((*nf >> 8) & 0xff);  // the creator and the free variables
                size_.words += 1 + arity + n;
                env = p + 8 * (1 + arity);
            }
            for (uint64_t i = 0; i < n; i++) {
                auto e = r_.word(env + 8 * i);
                if (!e || !push(todo, *e)) return false;
            }
            return true;
        }
        if (sub == st.sub_bin) {
            if (src_.layout.bits_unified()) {  // ERL_REFC_BITS_SIZE with its BinRef, or a copy of the bits
                auto start = r_.word(p + 16), end = r_.word(p + 24), orig = r_.word(p + 32);
                if (!start || !end || !orig || *start > *end || !is_boxed(*orig)) return false;
                auto ohdr = r_.word(*orig - 2);
                if (!ohdr) return false;
                if ((*ohdr & 0x3c) == st.refc_bin) {
                    size_.words += 8;
                    size_.off_heap_bytes += (*end - *start) / 8;
                    if (memo_ && memo_->off_heap_data) {
                        auto base = r_.word(p + 8);
                        if (!base) return false;
                        memo_->off_heap_data((*base & ~uint64_t{3}) + *start / 8, (*end - *start + 7) / 8);
                    }
                } else {
                    size_.words += 2 + (*end - *start + 63) / 64;
                }
                return true;
            }
            auto b = binary_ref(r_, src_, p, *hdr);
            auto bits = r_.word(p + 24), orig = r_.word(p + 32);
            if (!b || !bits || !orig) return false;
            uint64_t partial = (*bits & 0xff) + ((*bits >> 8) & 0xff);  // bitsize + bitoffs
            uint64_t extra = partial > 8 ? 2 : partial > 0 ? 1 : 0;
            if (partial) size_.words += 5;  // ERL_SUB_BIN_SIZE
            if (b->off_heap) {
                size_.words += 6;  // PROC_BIN_SIZE
                size_.off_heap_bytes += b->bytes;
                if (memo_ && memo_->off_heap_data) memo_->off_heap_data(b->data, b->bytes + (partial ? 1 : 0));
            } else {
                size_.words += 2 + (b->bytes + extra + 7) / 8;
            }
            return true;
        }
        if (!src_.layout.bits_unified() && sub == st.refc_bin) {
            auto bytes = r_.word(p + 8);
            if (!bytes) return false;
            size_.off_heap_bytes += *bytes;
            if (memo_ && memo_->off_heap_data) {
                auto data = r_.word(p + 32);  // ProcBin: thing, size, next, val, bytes
                if (!data) return false;
                memo_->off_heap_data(*data, *bytes);
            }
        }
        if (arity > kMaxThing) return false;
        size_.words += arity + 1;  // bignums, floats, refs, heap binaries, external things
        return true;
    }

    const TermSource& src_;
    Reader r_;
    Size size_;
    SizeMemo* memo_;
    Mode mode_;
};

}  // namespace

std::string printed_atom(std::string_view text) {
    bool bare = !text.empty() && std::islower(static_cast<unsigned char>(text[0])) && !is_reserved_word(text) &&
                std::all_of(text.begin(), text.end(), [](char c) {
                    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '@';
                });
    if (bare) return std::string(text);
    return "'" + escaped(text, '\'') + "'";  // control characters as io_lib writes them: '\e[2J'
}

std::string elixir_atom(std::string_view text) {
    if (text == "true" || text == "false" || text == "nil") return std::string(text);
    // An alias: 'Elixir.MyApp.Repo' is MyApp.Repo, each segment a capitalized identifier.
    auto identifier = [](std::string_view s, bool capital) {
        return !s.empty() && (capital ? std::isupper(static_cast<unsigned char>(s[0]))
                                      : std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_') &&
               std::all_of(s.begin(), s.end(), [](char c) {
                   return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '@';
               });
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

std::optional<Size> flat_size(const TermSource& src, uint64_t term, uint64_t max_cells) {
    return FlatSizer(src, max_cells).size(term);
}

std::optional<uint64_t> distinct_words(const TermSource& src, uint64_t term, SizeMemo& memo) {
    if (memo.reads_left <= 0) return std::nullopt;
    auto s = FlatSizer(src, static_cast<uint64_t>(memo.reads_left), &memo, FlatSizer::Mode::distinct).size(term);
    if (!s) return std::nullopt;
    return s->words;
}

std::optional<Size> flat_size(const TermSource& src, uint64_t term, SizeMemo& memo) {
    if (memo.reads_left <= 0) return std::nullopt;
    return FlatSizer(src, static_cast<uint64_t>(memo.reads_left), &memo).size(term);
}

}  // namespace bb::term
