// Aggregates the run's samples and writes them in --format: at the end, or with --every at
// the end of each interval (then forgets them: memory stays flat however long it runs).
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "profile/aggregate.hpp"
#include "profile/alloc_strata.hpp"
#include "profile/sched_states.hpp"
#include "report/report.hpp"
#include "run/session.hpp"

namespace bb {

// Who ran a sample: its process if the walker attributed it to one (a port task's: its port's
// connected process), and its scheduler.
inline Who who_of(const bb_record& r) {
    return {(r.flags & BB_F_PROC)   ? r.erl_pid
            : (r.flags & BB_F_PORT) ? r.port_owner
                                    : 0,
            r.sched_type == BB_SCHED_NONE ? 0u : uint32_t{r.sched_type} << 16 | r.sched_no};
}

// What kind of process a record's is, for pooling small heaps (profile/alloc_strata.hpp): its
// registered name, else its initial call as proc_lib and Elixir's Task keep it, else the VM's;
// 0 if the record does not say.
inline uint64_t process_kind(const bb_record& r) {
    if (!(r.flags & BB_F_PROC)) return 0;
    if (r.reg_name) return r.reg_name;
    const __u64* m = r.dict_initial[0] ? r.dict_initial : r.initial;
    if (!m[0]) return 0;
    return m[0] * 0x9e3779b97f4a7c15ull ^ (m[1] + 0x7f4a7c15) * 0xbf58476d1ce4e5b9ull ^ m[2];
}

// An allocation profile's record (the profile weighs words): a GC entry's exact words and a
// watchpoint's sample go to `strata`, which scales each heap's samples to its exact words when
// drained (a GC entry's record has no stack); the rest (the heap fragments BIFs ask for,
// -e alloc-gc's stacks) to `agg` as they are. The agent's allocation profiles weigh as
// beam-bpf-sample's do.
inline void add_alloc(const bb_record& r, std::span<const uint32_t> frames, Who who, AllocStrata& strata,
                      Aggregator& agg) {
    if (r.flags & BB_F_ALLOC_TOTAL) strata.exact(r.erl_pid, r.alloc_words, process_kind(r), r.ip);
    else if (r.flags & BB_F_WATCH) strata.sample(r.heap_owner, frames, r.alloc_words, who);
    else agg.add(frames, r.alloc_words, who);
}

// The normal schedulers whose time a CPU profile of `vm` splits by msacc state
// (profile/sched_states.hpp), 0 where the split would not be right: it needs every sample of
// theirs (no --process), each of a known time (cpu-clock), and their native frames named (which
// say the collector, polling, aux work: not a stripped OTP 29's without its debug file).
inline size_t split_schedulers(const Vm& vm, const CommonOptions& o) {
    if (!o.ns_per_sample || !o.process.empty() || o.only_erlang || !vm.has_symbol("erts_check_io")) return 0;
    size_t n = 0;
    for (const SchedThread& t : vm.sched_threads()) n += t.sched.type == BB_SCHED_NORMAL;
    return n;
}

class Reporter {
public:
    // `unit`: what a sample counts ("samples", "calls", "words": -e alloc's weights).
    Reporter(Session& s, const CommonOptions& o, const char* unit, TopOptions top);
    // `weight`: what the record stands for in the unit (-e wall: nanoseconds of process time).
    void add(const bb_record& r, std::span<const uint32_t> frames, uint64_t weight = 1);
    // From the run loop: writes and starts a new interval when --every has passed.
    void tick(uint64_t now_ns);
    // The last interval (or the only report).
    void finish(uint64_t now_ns);
    // A line above the top table (beam-bpf-blame's "N samples of FUNC").
    void set_heading(std::string h) { heading_ = std::move(h); }
    // A CPU profile of the whole VM (cpu-clock, with native frames): count the `schedulers`
    // normal schedulers' samples by msacc state, for a line above the top table and the run's
    // shares (run_states()).
    void count_sched_states(size_t schedulers) { schedulers_ = schedulers; }
    std::optional<std::array<double, kSchedStates>> run_states(uint64_t now_ns) const;

private:
    void write(uint64_t now_ns);
    Session& s_;
    const CommonOptions& o_;
    const char* unit_;
    bool weigh_words_;  // unit "words": records weigh what they allocated
    TopOptions top_;
    std::string heading_;
    Aggregator agg_;
    AllocStrata strata_;               // -e alloc's GC entries and watchpoints
    uint64_t interval_start_ns_ = 0;   // monotonic
    size_t schedulers_ = 0;            // count_sched_states(): 0 if not
    SchedStates states_, run_states_;  // this interval's, the run's
    bool hinted_unnamed_ = false;      // the line on unnamed native code, once a run
};

}  // namespace bb
