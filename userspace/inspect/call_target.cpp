#include "inspect/call_target.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

namespace bb {

namespace {

// A reference's words: its header (subtag REF_SUBTAG, erl_term.h) and what follows it: the
// numbers, and in a magic or pid reference the binary's or the pid's word. Two copies of one
// reference (the caller's and the monitor's) have the same words.
constexpr size_t kMaxRefWords = 8;
using RefWords = std::vector<uint64_t>;
constexpr uint64_t kHeaderMask = 0x3f, kRefHeader = 0x10;  // (REF_SUBTAG 4 << 2) | TAG_PRIMARY_HEADER
constexpr size_t kMaxRefs = 8;                             // references of one frame compared

bool is_boxed(uint64_t term) { return (term & 3) == 2; }
bool is_local_pid(uint64_t term) { return (term & 0xf) == 0x3; }

// The words of the reference `term` points to; nullopt if it is no reference or does not read.
std::optional<RefWords> ref_words(const RemoteMemory& mem, uint64_t term) {
    if (!is_boxed(term)) return std::nullopt;
    const uint64_t addr = term & ~uint64_t{3};
    auto header = mem.read<uint64_t>(addr);
    if (!header || (*header & kHeaderMask) != kRefHeader) return std::nullopt;
    const uint64_t arity = *header >> 6;
    if (arity == 0 || arity >= kMaxRefWords) return std::nullopt;
    RefWords w(arity + 1);
    if (!mem.read(addr, std::as_writable_bytes(std::span(w)))) return std::nullopt;
    if (w[0] != *header) return std::nullopt;  // changed between the two reads
    return w;
}

}  // namespace

std::optional<uint64_t> call_target(const RemoteMemory& mem, const VmOffsets& o, const ProcessEntry& p,
                                    std::span<const uint64_t> leaf_frame) {
    if (!p.monitors || (p.monitors & 7)) return std::nullopt;
    std::vector<RefWords> refs;
    for (uint64_t y : leaf_frame) {
        if (refs.size() == kMaxRefs) break;
        if (auto r = ref_words(mem, y)) refs.push_back(std::move(*r));
    }
    if (refs.empty()) return std::nullopt;

    // Every node of the red-black tree (its order does not matter: each node is compared).
    const uint32_t node_bytes = std::max({o.mln_right, o.mln_left, o.mln_item}) + 8;
    if (node_bytes > 256 || o.mln_key_offset + 2 > 256) return std::nullopt;
    std::array<std::byte, 256> node{};
    const uint32_t read_bytes = std::max<uint32_t>(node_bytes, o.mln_key_offset + 2);
    auto word_at = [&](uint32_t off) {
        uint64_t v = 0;
        std::memcpy(&v, node.data() + off, sizeof v);
        return v;
    };
    std::vector<uint64_t> todo{p.monitors};
    for (int visited = 0; !todo.empty(); visited++) {
        if (visited == kMaxMonitorNodes) return std::nullopt;
        const uint64_t at = todo.back();
        todo.pop_back();
        if (!mem.read(at, std::span(node.data(), read_bytes))) return std::nullopt;
        uint16_t key_offset = 0;
        std::memcpy(&key_offset, node.data() + o.mln_key_offset, sizeof key_offset);
        // The key: the monitor's reference, a term in its monitor data (at key_offset from
        // the node; erts_monitor_create() sets it).
        if (auto key = mem.read<uint64_t>(at + key_offset)) {
            if (auto words = ref_words(mem, *key); words && std::find(refs.begin(), refs.end(), *words) != refs.end()) {
                const uint64_t item = word_at(o.mln_item);
                return is_local_pid(item) ? std::optional(item) : std::nullopt;
            }
        }
        for (uint64_t child : {word_at(o.mln_right), word_at(o.mln_left)})
            if (child && !(child & 7)) todo.push_back(child);
    }
    return std::nullopt;
}

}  // namespace bb
