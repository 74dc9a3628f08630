// The words of boxed terms as erl_term.h lays them out, read with a budget: what the term
// printer (terms.cpp) and the term sizer (term_size.cpp) both follow. Internal to them.
#pragma once
#include <algorithm>
#include <bit>
#include <cstdint>
#include <optional>
#include <span>

#include "inspect/terms.hpp"

namespace bb::term::detail {

inline constexpr uint64_t kTuple = 0x00, kPosBig = 0x08, kNegBig = 0x0c, kRef = 0x10, kFun = 0x14, kFloat = 0x18,
                          kExternalPid = 0x30, kExternalPort = 0x34, kExternalRef = 0x38;
// The subtags that moved between releases come from the release's TermLayout.
inline const TermLayout& subtags(const TermSource& s) { return s.layout; }

// Map headers (erl_term.h): the kind in bits 6-7, an arity in 8-15 (1 for a hash map's head,
// whose size word follows), the bitmap of a hash map node in 16-31.
inline constexpr uint64_t kFlatmap = 0;
inline uint64_t map_kind(uint64_t hdr) { return (hdr >> 6) & 3; }
inline uint64_t map_arity(uint64_t hdr) { return (hdr >> 8) & 0xff; }
inline uint64_t map_children(uint64_t hdr) { return std::popcount((hdr >> 16) & 0xffff); }
inline constexpr uint64_t kMaxFlatmap = 32;  // MAP_SMALL_MAP_LIMIT

inline constexpr uint64_t kMaxThing = 1u << 20;  // words in a bignum or binary header worth believing

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
    uint64_t data = 0;   // address of its first byte
    uint64_t bytes = 0;  // whole bytes
    bool whole = true;   // a whole number of bytes, starting on a byte
    bool off_heap = false;
};

// Resolves a binary of any kind (heap, refc, sub) to its bytes; nullopt if malformed.
inline std::optional<BinaryRef> binary_ref(Reader& r, const TermSource& src, uint64_t p, uint64_t hdr, int hops = 0) {
    const TermLayout& st = subtags(src);
    uint64_t sub = hdr & 0x3c;
    auto w = [&](int i) { return r.word(p + 8 * i); };
    if (sub == st.heap_bin) {
        auto size = w(1);
        if (!size) return std::nullopt;
        BinaryRef b{p + 16, src.layout.bits_unified() ? *size / 8 : *size, !src.layout.bits_unified() || *size % 8 == 0,
                    false};
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

}  // namespace bb::term::detail
