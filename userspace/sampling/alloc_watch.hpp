// -e alloc's watchpoints: one hardware write breakpoint per CPU carrying the walker's on_watch
// program, all on the same word of one Erlang process's heap, moved as the BPF side asks (the
// states are in include/bb_alloc_watch.h) by two arming threads, each pinned to half of the CPUs
// at real-time priority: a collection waits for the arm, spinning on its CPU, so the thread of
// the other half does it. The process watched rotates among those that allocate, chosen in
// proportion to the words their GC entries report.
#pragma once
#include <bpf/libbpf.h>

#include <array>
#include <atomic>
#include <memory>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/unique_fd.hpp"
#include "bb_alloc_watch.h"

namespace bb {

struct AllocWatchCounters {
    uint64_t flips = 0;    // epochs chosen to sample
    uint64_t sampled = 0, missed = 0, late = 0, stack = 0;  // how their watches ended
    uint64_t hits = 0, ignored = 0;  // watchpoint traps in the VM, and those that were no sample
    uint64_t switches = 0;           // processes watched in turn
    uint64_t wait_ns = 0;            // what the flips' collections waited for the arm, in all
};

class AllocWatch {
public:
    struct Config {
        uint64_t interval_words = 0;            // mean words per sample
        std::optional<uint64_t> only_pid;       // --process: watch this pid term (masked) only
        uint64_t pid_mask = ~0ull;
    };
    // `shared` is the program's .bss struct bb_watch, `armer_of_cpu` its array of
    // BB_WATCH_MAX_CPUS bytes, `ticks` its two rings; the events are opened here and carry
    // `on_watch`. Throws UserError (one CPU only, no breakpoint slot free, no privileges, no
    // breakpoints).
    AllocWatch(bb_watch* shared, uint8_t* armer_of_cpu, std::array<bpf_map*, 2> ticks, bpf_map* counters,
               bpf_program* on_watch, const Config& cfg);
    ~AllocWatch();
    AllocWatch(const AllocWatch&) = delete;
    AllocWatch& operator=(const AllocWatch&) = delete;

    // A GC entry's words (bb_record with BB_F_ALLOC_TOTAL): what the rotation is weighed by.
    void note_gc(uint64_t c_p, uint64_t pid, uint64_t words);
    // Parks the watchpoints and stops the threads: no trap after it returns.
    void stop();
    AllocWatchCounters counters() const;

private:
    struct LinkDeleter {
        void operator()(bpf_link* l) const { bpf_link__destroy(l); }
    };
    struct RingDeleter {
        void operator()(ring_buffer* r) const { ring_buffer__free(r); }
    };
    // An arming thread: its ring, the CPUs it is pinned to, its own random numbers.
    struct Armer {
        AllocWatch* self = nullptr;
        std::unique_ptr<ring_buffer, RingDeleter> ring;
        std::vector<int> cpus;
        std::mt19937_64 rng{std::random_device{}()};
        std::thread thread;
    };
    void run(Armer& a);
    void on_tick(Armer& a, const bb_watch_tick& t);
    void arm(Armer& a);
    void finish(uint32_t outcome);
    void choose_process(std::mt19937_64& rng);
    bool move_to(uint64_t addr, bool park);

    bb_watch* w_;
    Config cfg_;
    std::vector<UniqueFd> events_;  // one breakpoint per online CPU
    std::vector<std::unique_ptr<bpf_link, LinkDeleter>> links_;
    int counters_fd_;
    std::array<Armer, 2> armers_;
    std::atomic<bool> stopping_{false};

    std::mutex mu_;         // the rotation's tallies, fed by the reader thread
    std::mutex choose_mu_;  // the choice of the process, made by either arming thread
    std::mutex move_mu_;    // the watchpoints' moves, by either
    struct Tally {
        uint64_t pid = 0, words = 0;
    };
    std::unordered_map<uint64_t, Tally> tally_;
    uint64_t chosen_ns_ = 0;

    std::atomic<uint64_t> flips_{0}, sampled_{0}, missed_{0}, late_{0}, stack_{0}, switches_{0};
};

}  // namespace bb
