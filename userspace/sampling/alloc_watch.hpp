// -e alloc's watchpoints: one hardware write breakpoint per CPU carrying the walker's on_watch
// program, all on the same word of one Erlang process's heap, moved by a thread of their own as
// the BPF side asks (the states are in include/bb_alloc_watch.h). The thread runs at real-time
// priority: a collection waits for it. The process watched rotates
// among those that allocate, chosen in proportion to the words their GC entries report.
#pragma once
#include <bpf/libbpf.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <unordered_map>
#include <vector>

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
    // `shared` is the program's .bss struct bb_watch; the events are opened here and carry
    // `on_watch`. Throws UserError (no breakpoint slot free, no privileges, no breakpoints).
    AllocWatch(bb_watch* shared, bpf_map* ticks, bpf_map* counters, bpf_program* on_watch, const Config& cfg);
    ~AllocWatch();
    AllocWatch(const AllocWatch&) = delete;
    AllocWatch& operator=(const AllocWatch&) = delete;

    // A GC entry's words (bb_record with BB_F_ALLOC_TOTAL): what the rotation is weighed by.
    void note_gc(uint64_t c_p, uint64_t pid, uint64_t words);
    // Parks the watchpoints and stops the thread: no trap after it returns.
    void stop();
    AllocWatchCounters counters() const;

private:
    struct Fd {
        int fd = -1;
    };
    void run();
    void on_tick(const bb_watch_tick& t);
    void arm();
    void finish(uint32_t outcome);
    void choose_process();
    bool move_to(uint64_t addr);

    bb_watch* w_;
    Config cfg_;
    std::vector<int> fds_;
    std::vector<bpf_link*> links_;
    ring_buffer* ring_ = nullptr;
    int counters_fd_;
    std::thread thread_;
    std::atomic<bool> stopping_{false};
    std::mt19937_64 rng_{std::random_device{}()};

    std::mutex mu_;  // the rotation's tallies, fed by the reader thread
    struct Tally {
        uint64_t pid = 0, words = 0;
    };
    std::unordered_map<uint64_t, Tally> tally_;
    uint64_t chosen_ns_ = 0;

    std::atomic<uint64_t> flips_{0}, sampled_{0}, missed_{0}, late_{0}, stack_{0}, switches_{0};
};

}  // namespace bb
