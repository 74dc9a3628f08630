// A VM the agent follows: its CPU profile, sampled by the walker every VM shares, and a part
// for each other kind of profile made of it (-e cpu,alloc,wall,offcpu). The agent goes through
// a VM's parts at every stage of its life (refresh, tick, drain, finish, detach), so that no
// stage leaves a kind out: a hung VM's last off-CPU interval was lost when one did.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agent/config.hpp"
#include "inspect/sched_util.hpp"
#include "profile/aggregate.hpp"
#include "profile/sched_states.hpp"
#include "profile/kinds.hpp"
#include "run/run_stats.hpp"
#include "run/session.hpp"
#include "target/discovery.hpp"

namespace bb::agent {

struct Followed;

// One kind of profile of a followed VM besides its CPU profile, living as long as the VM.
class VmPart {
public:
    virtual ~VmPart() = default;
    virtual const ProfileKind& kind() const = 0;
    // Its own session (a walker of its own), or nullptr: it reads through the VM's CPU session.
    virtual Session* session() { return nullptr; }
    virtual void drain() {}                    // its own walker's records
    virtual void tick(uint64_t /*now_ns*/) {}  // its sampling from user space, if it has some
    virtual bool has_data() const = 0;         // whether the interval so far holds anything
    // The interval's profile, complete (what was kept apart folded in): shipped, then clear()ed.
    virtual Aggregator& finish() = 0;
    virtual void clear() = 0;
    virtual uint64_t counted() const = 0;  // what its VmPartType::counter counts, since the attach
};

struct VmPartType {
    std::string_view kind;  // its -e word (profile/kinds.hpp's agent_name)
    std::string_view what;  // in the log: "no allocation profile"
    const char* counter;    // its --stats key (per VM and summed) and, with _total, its Prometheus counter
    const char* help;       // the Prometheus counter's
    uint64_t tick_ns;       // how often tick() wants to be called; 0: never
    // A part for a VM just attached; throws when the VM cannot have it (it goes on without).
    std::unique_ptr<VmPart> (*make)(Followed& f, const AgentConfig& cfg);
};
// In the order of profile/kinds.hpp.
std::span<const VmPartType> vm_part_types();

struct Followed {
    BeamProcess proc;
    VmLabels labels;
    // Its subdirectory, named at its first profile: a reload or a later name does not move its files.
    std::string dir_name;
    CommonOptions o;
    std::unique_ptr<Session> s;
    // Process names of this interval only: the session's own table keeps every pid it ever named,
    // which a VM that spawns processes all day would grow without bound.
    std::optional<ProcessNames> names;
    // Registered processes of this interval: pid term -> samples (--process-labels registered).
    std::unordered_map<uint64_t, uint64_t> registered;
    Aggregator agg;  // the CPU profile's interval
    RunStats st;
    uint64_t interval_start_ns = 0, interval_start_unix_ns = 0, last_check_ns = 0, profiles = 0;
    std::vector<uint32_t> frames;
    // After s: destroyed before the session some read through. Each type's at most once.
    std::vector<std::pair<const VmPartType*, std::unique_ptr<VmPart>>> parts;
    // Its schedulers' busy shares (inspect/sched_util.hpp), sampled by the agent's SchedSampler;
    // `util` is those of the last interval ended, for --stats and the metrics.
    std::shared_ptr<SchedUtil> sched;
    std::vector<SchedBusy> util;
    // Its normal schedulers' samples of the interval by msacc state (profile/sched_states.hpp),
    // counted where the VM names its functions (normal_schedulers > 0); `states` the last
    // interval's shares, for --stats and the metrics.
    size_t normal_schedulers = 0;
    SchedStates state_samples;
    std::optional<std::array<double, kSchedStates>> states;

    // Whose the record is; its process named now, while it is likely alive, and counted for
    // --process-labels registered.
    Who note_process(const bb_record& r);
    void handle(const bb_record& r);  // a CPU record, from the shared walker
    // The CPU session and each part's own.
    std::vector<Session*> sessions();
    // The code loaded or purged since the last drain: it must be known before the samples
    // taken after it are symbolized (records still in a ring were all taken before now).
    void refresh_symbols(uint64_t now_ns);
    // Whether the interval so far holds anything of any part: a VM whose threads all blocked
    // (a hung node, the case an off-CPU profile is for) has off-CPU data and no CPU sample.
    bool interval_has_data() const;
    bool has(const VmPartType& type) const;
    // What `type` counted of this VM (0 without such a part).
    uint64_t counted(const VmPartType& type) const;
};

}  // namespace bb::agent
