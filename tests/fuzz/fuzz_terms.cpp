// libFuzzer target: the term printer and sizer (terms.hpp), whose input is the target VM's memory. The
// input is that memory, at a fixed address; its first word is the term to print. The same memory
// is then a process heap for the inspector (heap_inspect.hpp): its first four words are roots
// and the next two dictionary slots, sized together (a visited set over the heap, shared cells
// memoized, loops ended) and folded. The seeds include crafted heaps: a cons cell whose tail is
// itself, a loop through two cells, a list shared by every root, a self-tailed dictionary bucket.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "inspect/heap_inspect.hpp"
#include "inspect/term_size.hpp"
#include "inspect/terms.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    constexpr uint64_t kBase = 0x10000;
    if (size < 8) return 0;
    bb::term::TermSource src;
    src.read = [&](uint64_t addr, std::span<std::byte> dst) {
        if (addr < kBase || addr - kBase > size || dst.size() > size - (addr - kBase)) return false;
        if (dst.empty()) return true;
        std::memcpy(dst.data(), data + (addr - kBase), dst.size());
        return true;
    };
    src.atom_text = [](uint64_t atom) -> std::optional<std::string> {
        if (bb::term::atom_index(atom) > 300) return std::nullopt;
        return std::string(bb::term::atom_index(atom) % 40, 'a');
    };
    src.pid_text = [](uint64_t) { return std::string("<0.1.0>"); };
    src.layout = (data[0] & 0x80) ? ((data[0] & 0x40) ? bb::kTerms29 : bb::kTerms27) : bb::kTerms25;
    uint64_t term;
    std::memcpy(&term, data, 8);
    src.read_off_heap = src.read;
    bb::term::Limits limits{.max_chars = 80, .depth = static_cast<int>(data[1] % 10) - 1, .max_reads = 4096};
    if (auto t = bb::term::text(src, term, limits); t && t->size() > 83) __builtin_trap();  // the cap holds
    bb::term::flat_size(src, term, 100'000);

    bb::HeapSnapshot heap;
    heap.areas.push_back({kBase, std::vector<std::byte>(size & ~size_t{7})});
    std::memcpy(heap.areas[0].bytes.data(), data, heap.areas[0].bytes.size());
    auto word = [&](size_t i) {
        uint64_t w = 0;
        if (8 * (i + 1) <= size) std::memcpy(&w, data + 8 * i, 8);
        return w;
    };
    for (size_t i = 0; i < 4; i++) heap.messages.push_back(word(i));
    bb::dictionary_pairs(heap, {word(4), word(5)});
    if (heap.dictionary.size() > 2 * 1024) __builtin_trap();  // a bucket is read at most once
    bb::term::TermSource heap_src = src;
    heap_src.read = [&heap](uint64_t addr, std::span<std::byte> dst) { return heap.read(addr, dst); };
    auto roots = bb::root_set(heap, "f/0", [](uint64_t) { return std::string("g/1"); });
    bb::size_roots(heap, heap_src, roots, {.max_reads = 200'000, .max_ns = 1'000'000'000});
    for (bb::Root& r : bb::fold_shared(std::move(roots))) bb::term::text(heap_src, r.term, limits);
    return 0;
}
