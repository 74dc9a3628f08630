// -e alloc: the watchpoints' samples, each process heap's scaled to the words its GC entries
// counted exactly.
//
// A watch samples an epoch only if no other watch is on when it begins, and how often that is
// differs between processes: without --process, a process whose collections come every few
// microseconds, beside one whose epochs last milliseconds (bb_alloc_mix `pair`, entry and return
// probes), had 55% of its words sampled and the other 93%: by the sampled words alone the first
// read 36% of the VM's allocation where it did 49%. The samples give the shares within each heap
// (which of a process's epochs lose is blind to the code that fills them, unless another process
// runs in step with its collections: docs/allocation-profiling.md, Where it is still biased),
// the GC entries give each heap's words: each heap's samples are scaled to its exact words
// (post-stratification, the strata being the heaps). The words of a heap no sample came from
// are kept too, under its process with one frame, "[allocation not sampled]": a profile's words
// add up to the exact total.
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>

#include "profile/aggregate.hpp"

namespace bb {

class AllocStrata {
public:
    // A GC entry's exact words on the young heap of process `pid` (a pid term).
    void exact(uint64_t pid, uint64_t words);
    // A watchpoint's sample of the heap of process `owner`: its stack (root first) and weight
    // in words; `who` wrote the word (the owner, or a process copying a message into its heap).
    void sample(uint64_t owner, std::span<const uint32_t> stack, uint64_t words, Who who);
    // Adds the interval's samples to `agg`: each heap's scaled so that they add up to its exact
    // words (as they are where no exact words came: an epoch still open at the interval's end),
    // and the exact words of heaps no sample came from as `unsampled` (a location id) charged to
    // their process. Then starts a new interval.
    void drain_into(Aggregator& agg, uint32_t unsampled);
    bool empty() const { return heaps_.empty(); }

private:
    struct Heap {
        uint64_t exact = 0, sampled = 0;
        Aggregator samples;
    };
    std::unordered_map<uint64_t, Heap> heaps_;  // by the owner's pid term
};

}  // namespace bb
