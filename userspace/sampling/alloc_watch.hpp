// -e alloc's watchpoints: one hardware write breakpoint per CPU carrying the walker's on_watch
// program, all on the same word of one Erlang process's heap, moved as the BPF side asks (the
// states are in include/bb_alloc_watch.h) by two arming threads, each pinned to half of the CPUs
// at real-time priority: a collection waits for the arm, spinning on its CPU, so the thread of
// the other half does it.
#pragma once
#include <bpf/libbpf.h>

#include <array>
#include <atomic>
#include <memory>
#include <cstdint>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "base/unique_fd.hpp"
#include "bb_alloc_watch.h"

namespace bb {

struct AllocWatchCounters {
    uint64_t flips = 0;                                                  // epochs chosen to sample
    uint64_t sampled = 0, missed = 0, late = 0, stack = 0, expired = 0;  // how their watches ended
    // The traps, the flips' waits for the arm and the collections that found a watch on are
    // the walker's counters (BB_C_WATCH_*).
};

class AllocWatch {
public:
    struct Config {
        uint64_t interval_words = 0;  // mean words per sample
        // Watchpoints in a virtual machine (--watchpoints-in-vm): refused without it (below).
        bool in_vm_ok = false;
    };
    // A virtual machine is refused unless cfg.in_vm_ok: there, a hypervisor can deliver a
    // watchpoint's trap with its debug status (DR6) empty, and the kernel then takes the trap for
    // an INT1 instruction of the VM's own and sends beam.smp a SIGTRAP that kills it (seen on
    // this project's test host: docs/allocation-profiling.md#virtual-machines). On bare metal the
    // CPU always reports its breakpoint.
    // `shared` is the program's .bss struct bb_watch, `armer_of_cpu` its array of
    // BB_WATCH_MAX_CPUS bytes, `ticks` its two rings; the events are opened here and carry
    // `on_watch`. Throws UserError (one CPU only, no breakpoint slot free, no privileges, no
    // breakpoints).
    AllocWatch(bb_watch* shared, uint8_t* armer_of_cpu, std::array<bpf_map*, 2> ticks, bpf_program* on_watch,
               const Config& cfg);
    ~AllocWatch();
    AllocWatch(const AllocWatch&) = delete;
    AllocWatch& operator=(const AllocWatch&) = delete;

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
    void expire_if_old();
    bool move_to(uint64_t addr, bool park);

    bb_watch* w_;
    Config cfg_;
    std::vector<UniqueFd> events_;  // one breakpoint per online CPU
    std::vector<std::unique_ptr<bpf_link, LinkDeleter>> links_;
    std::array<Armer, 2> armers_;
    std::atomic<bool> stopping_{false};

    std::mutex move_mu_;     // the watchpoints' moves, by either thread
    uint64_t armed_ns_ = 0;  // when the last watch was armed (under move_mu_)

    std::atomic<uint64_t> flips_{0}, sampled_{0}, missed_{0}, late_{0}, stack_{0}, expired_{0};
};

}  // namespace bb
