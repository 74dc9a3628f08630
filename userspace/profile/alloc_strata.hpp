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
//
// A heap that allocated fewer words than the period in an interval is no stratum of its own: one
// sample stands for the period, so such heaps are mostly unsampled, and the few that are sampled
// are scaled down to their words. Servers allocate mostly in such heaps (a process per request
// or message, living milliseconds): RabbitMQ under load put 65% of its words under "[allocation
// not sampled]". These heaps are pooled by the kind of process they are (its registered name, or
// its initial call as proc_lib and Elixir keep it, else the VM's), and each pool's samples are
// scaled to the pool's exact words: every word of the pool had the same chance, and short heaps
// of one kind run the same code with epochs alike (which the per-heap strata correct for is
// epochs of different lengths). The pool's words are charged to the processes sampled in it.
// Only heaps that collected in the interval are pooled: a process's first epoch (from its spawn
// to its first collection) is never sampled, since no collection's return starts it, so a
// process that ended without collecting (its words counted at its exit) ran code no sample of
// its kind saw: its words stay under it as "[allocation not sampled]".
#pragma once
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "profile/aggregate.hpp"

namespace bb {

class AllocStrata {
public:
    // `period`: the watchpoints' interval in words, below which a heap's interval is pooled;
    // `exits`: the addresses of the exit probe (a record from there is a process's last epoch).
    explicit AllocStrata(uint64_t period = 0, std::vector<uint64_t> exits = {})
        : period_(period), exits_(std::move(exits)) {}
    // A GC entry's (or, at `ip` one of `exits`, an exit's) exact words on the young heap of
    // process `pid` (a pid term), of a process of `kind` (0: not known; such a heap is never
    // pooled).
    void exact(uint64_t pid, uint64_t words, uint64_t kind = 0, uint64_t ip = 0);
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
        uint64_t exact = 0, sampled = 0, kind = 0;
        bool collected = false;  // a GC entry's words came (not only its exit's)
        Aggregator samples;
    };
    uint64_t period_;
    std::vector<uint64_t> exits_;
    std::unordered_map<uint64_t, Heap> heaps_;  // by the owner's pid term
};

}  // namespace bb
