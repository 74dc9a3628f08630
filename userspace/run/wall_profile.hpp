// One VM's wall-clock profile (-e wall): each tick's processes (sampling/wall_sampler.hpp)
// named as the walker's records are (the same symbolizer, the same frames), under a root frame
// of their state ("[waiting]", "[runnable]", ...), weighed in nanoseconds of process time.
// beam-bpf-sample -e wall (run/wall_loop.hpp) and beam-bpf-agent -e cpu,wall tick one each.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "run/session.hpp"
#include "sampling/wall_sampler.hpp"

namespace bb {

// The frame under a waiting process's leaf: "[receive, queue 0]", with its message queue's
// length bucketed by powers of ten ("1-9", "10-99", ...): few distinct frames, and the order of
// magnitude is what tells a mailbox no one drains.
std::string receive_frame(int64_t queue_len);

// What the ticks read and kept, summed.
struct WallCounts {
    uint64_t ticks = 0, live = 0, kept = 0, read = 0, busy = 0, not_read = 0, truncated = 0;
    uint64_t exited = 0, changed = 0, unreadable = 0, calls_named = 0, calls_unknown = 0;
    uint64_t slot_bytes = 0, process_reads = 0, words = 0;
    uint64_t weight_ns = 0;  // process time the profile stands for
};

class WallProfile {
public:
    // A process's stack: the record the walker would have made of it (its pid, names), its
    // root-first frames (state first), and the nanoseconds of process time it stands for.
    using OnStack = std::function<void(const bb_record&, std::span<const uint32_t>, uint64_t weight_ns)>;
    // `s`'s only_pid (--process) makes each tick read that process alone; UserError if it is
    // not in the table, or if the table does not read.
    WallProfile(Session& s, uint32_t per_tick, uint32_t max_frames, const std::string& process_option = "");
    // One tick at `now_ns`; its processes go to `on_stack`. UserError when the table no longer
    // reads (the VM is gone).
    void tick(uint64_t now_ns, const OnStack& on_stack);
    const WallCounts& counts() const { return n_; }
    // Whether a stack of this profile's is an idle process's: waiting in a receive with nothing
    // queued, or hibernated (an idle server, as most of a node's processes are).
    bool idle(std::span<const uint32_t> stack) const {
        return !stack.empty() && (stack.back() == idle_receive_ || stack.back() == hibernated_);
    }
    uint32_t table_slots() const { return table_.max; }

private:
    std::string callee_frame(const WallProcess& w);

    Session& s_;
    uint32_t max_frames_;
    ProcessTableRef table_;
    uint64_t now_ = 0;  // the tick's time: code lookups are of the code live then
    std::unique_ptr<WallSampler> sampler_;
    std::unordered_map<std::string, uint32_t> roots_;  // state -> its root frame
    uint32_t truncated_, not_read_, idle_receive_, hibernated_;
    std::unique_ptr<bb_record> record_;
    std::vector<uint32_t> frames_, stack_;
    uint64_t last_tick_ = 0;
    WallCounts n_;
};

}  // namespace bb
