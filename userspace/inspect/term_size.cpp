// The term sizer: what a term occupies, as the VM's copy would count it.
#include "inspect/term_size.hpp"

#include "inspect/term_words.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace bb::term {

namespace {

using namespace detail;

// size_object() of copy.c, for both layouts, with an explicit stack and a cell budget.
// With a SizeMemo: distinct words (each cell once), or flat sizes with shared cells memoized.
class FlatSizer {
public:
    enum class Mode { flat, distinct };
    FlatSizer(const TermSource& src, uint64_t max_cells, SizeMemo* memo = nullptr, Mode mode = Mode::flat)
        : src_(src),
          r_(src, static_cast<int64_t>(std::min<uint64_t>(max_cells, INT64_MAX))),
          memo_(memo),
          mode_(mode) {}

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
                    memo_->sizes[o.cell] = {size_.words - o.before.words,
                                            size_.off_heap_bytes - o.before.off_heap_bytes};
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
        // A native record (OTP 29) is counted as the VM's size_object() counts it: as a tuple
        // whose first element is its definition (a tuple-like literal, counted too).
        if (sub == kTuple || sub == st.record) {
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
