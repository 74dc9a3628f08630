// Counts of identical samples (stack, and who ran it), turned into a Profile at the end of a
// run or of each --every interval.
#pragma once
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "profile/frames.hpp"
#include "profile/profile.hpp"

namespace bb {

// Who a sample ran for: the Erlang process and the scheduler; zero when none.
struct Who {
    uint64_t erl_pid = 0;
    uint32_t sched = 0;  // type << 16 | number, as the record has them
    bool operator==(const Who&) const = default;
};

// What a Profile says besides its samples.
struct ProfileMeta {
    std::string title;
    std::string unit = "samples";
    uint64_t period_ns = 0, start_unix_ns = 0, duration_ns = 0;
    bool lines = false;
    // Texts of a pid term and of a scheduler (type << 16 | number); unset: left empty.
    std::function<std::string(uint64_t)> pid_text, process_text;
    // --by-process: the root frame of a process's samples ("my_server <0.85.0>"); unset: none.
    // Samples of no process keep their own root ("[no Erlang process]").
    // --by-process: the root frame of a process's samples; processes of one name share it, and
    // it says how many there were ("my_pool_worker (312 processes)").
    std::function<std::string(uint64_t)> process_root;
    // With it, a process's kind ("{rabbit_channel,...}", "" for none): the root of the processes
    // of that kind, each one's name a frame below it.
    std::function<std::string(uint64_t)> process_kind;
    std::function<std::string(uint32_t)> sched_text;
};

class Aggregator {
public:
    // `stack` is root first, as location ids of one FrameTable.
    void add(std::span<const uint32_t> stack, uint64_t count = 1, Who who = {});
    // Every sample of `from`, its count times `factor` (rounded; at least 1 where it was).
    void add_scaled(const Aggregator& from, double factor);
    uint64_t total() const { return total_; }
    size_t unique_stacks() const { return samples_.size(); }
    void clear() {
        samples_.clear();
        total_ = 0;
    }
    Profile profile(const FrameTable& frames, const ProfileMeta& meta) const;

private:
    struct Key {
        std::vector<uint32_t> stack;
        Who who;
        bool operator==(const Key&) const = default;
    };
    struct Hash {
        size_t operator()(const Key& k) const noexcept;
    };
    std::unordered_map<Key, uint64_t, Hash> samples_;
    uint64_t total_ = 0;
};

}  // namespace bb
