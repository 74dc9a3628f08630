// beam-bpf-agent: every beam.smp on the host, found as it starts (a /proc scan each second),
// sampled until it exits, one pprof profile per VM per interval, to a directory, Pyroscope
// and/or an OTLP/HTTP receiver of profiles.
//
// Each followed VM has its own Session (Vm, Symbolizer, names, perf events); one loaded BPF
// walker samples them all (sampling/walker.hpp: each VM's layout looked up by its pid), and
// their native unwind tables and rows are shared (native/unwind_store.hpp). Each other kind of
// profile of a VM (-e cpu,alloc,wall,offcpu) is a part of it (agent/followed.hpp).
// See docs/agent.md.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "agent/config.hpp"
#include "target/discovery.hpp"
#include "agent/matcher.hpp"
#include "agent/metrics.hpp"
#include "agent/profile_dir.hpp"
#include "agent/sched_sampler.hpp"
#include "agent/sinks.hpp"
#include "run/session.hpp"

namespace bb {
class Aggregator;
struct ProfileKind;
}  // namespace bb

namespace bb::agent {

struct Followed;

// The agent's counters since its start, all VMs, in one list: each is a field of AgentCounters,
// its --stats key (the same name) and a Prometheus counter (NAME_total) with this help.
#define BB_AGENT_COUNTERS(X)                                                    \
    X(vms_attached, "VMs attached since the start")                             \
    X(vms_detached, "VMs detached since the start")                             \
    X(vms_refused, "VMs that could not be attached")                            \
    X(samples, "samples aggregated")                                            \
    X(ring_dropped, "samples lost in a full ring buffer")                       \
    X(orphaned, "records of a VM taken as it was detached, no longer followed") \
    X(profiles, "profiles finished")                                            \
    X(write_errors, "profiles the directory could not take")

struct AgentCounters {
#define BB_AGENT_COUNTER_FIELD(name, help) uint64_t name = 0;
    BB_AGENT_COUNTERS(BB_AGENT_COUNTER_FIELD)
#undef BB_AGENT_COUNTER_FIELD
    // Each VmPartType's counter (agent/followed.hpp) of the VMs detached: allocation samples,
    // processes read into wall profiles, off-CPU blocks.
    std::map<std::string, uint64_t, std::less<>> counted;
};

// --process-labels registered: the `process` sample label of each registered process (pid term ->
// registered name), given its samples in the profile: the `cap` names with the most samples keep
// their name, every other process is "other" (its value when absent from the map). Distinct
// values per profile: at most cap + 1, whatever the VM runs.
std::unordered_map<uint64_t, std::string> registered_labels(const std::unordered_map<uint64_t, uint64_t>& samples,
                                                            const std::function<std::string(uint64_t)>& name,
                                                            size_t cap);

// A VM's service name: configuration first (service.NODE, service), then what the target
// supplies (its release name, else its node name) if cfg.target_names, else "beam.smp".
// `source` (if given): "" when configured or the default, else which of the target's names it is.
std::string service_name(const AgentConfig& cfg, const VmLabels& l, std::string* source = nullptr);

using Labels = std::vector<std::pair<std::string, std::string>>;
// A VM's profile labels, split by what they cost in a store that makes a series of each distinct
// set (Pyroscope): `series` are the same across restarts of the VM and of its pod; `resource`
// changes at each (pids, container id, cgroup path, pod name and uid) and goes only where it
// costs no series: the OTLP resource, under the semantic conventions' names.
struct VmLabelSets {
    Labels series, resource;
};
// `service_source`: "" when the service name is configured, else where the target supplied it.
VmLabelSets label_sets(const VmLabels& l, const std::string& service, const std::string& service_source,
                       const std::string& host, pid_t os_pid, pid_t ns_pid, int otp_release,
                       const std::string& erts_version, const Labels& configured);

class Agent {
public:
    explicit Agent(AgentConfig cfg);
    ~Agent();
    // Runs until `stop` is set; `reload` set means: call `reconfigure` and apply what it returns.
    // On stop, every followed VM's last (partial) interval is written and pushed, the push
    // queue flushed for up to 5 s.
    void run(const std::atomic<bool>& stop, std::atomic<bool>& reload, const std::function<AgentConfig()>& reconfigure);

private:
    using Key = std::pair<pid_t, uint64_t>;  // pid and start time: pids are reused
    void scan(uint64_t now_ns);
    bool wanted(const BeamProcess& p, const VmLabels& l) const;
    void attach(const BeamProcess& p, uint64_t now_ns);
    // Keeps one VM's walker slot and symbols current (throws if it failed: it is detached).
    void step(Followed& f, uint64_t now_ns);
    // Hands every record the walkers emitted to its VM: the shared walker's, by pid, and each
    // part's own walker's.
    void drain();
    // Ends the VM's interval: its CPU profile and each of its parts'.
    void finish_interval(Followed& f, uint64_t now_ns);
    // One profile of the interval, named and labelled, to the directory and the stores.
    void ship(Followed& f, const ProfileKind& kind, Session& s, const Aggregator& agg, uint64_t now_ns);
    void detach(pid_t pid, const std::string& why);
    void apply(AgentConfig cfg);
    void write_stats() const;
    std::string service_of(const VmLabels& l, std::string* source = nullptr) const {
        return service_name(cfg_, l, source);
    }

    AgentConfig cfg_;
    Matcher matcher_;  // cfg_.match compiled
    std::string host_;
    std::optional<ProfileDir> dir_;
    std::unique_ptr<Pusher> pusher_, otlp_;  // Pyroscope, OTLP
    std::unique_ptr<MetricsEndpoint> metrics_;
    // The walker that samples every followed VM, and the native unwind tables and rows they
    // share (each holds its share).
    SharedSampling shared_;
    std::map<pid_t, std::unique_ptr<Followed>> vms_;
    // Declared after vms_: destroyed first, its thread gone before the VMs it samples.
    SchedSampler sched_;
    bool told_sched_priority_ = false;  // the sampler's lower priority logged once
    std::set<Key> refused_;
    // VMs no --match wants, with the node name they had then: one that takes a name later
    // (RabbitMQ starts distribution after its boot) is looked at again.
    std::map<Key, std::string> ignored_;
    std::map<Key, uint64_t> first_failure_ns_;  // young VMs that failed to attach, retried a while
    AgentCounters c_;
    mutable std::string stats_error_;  // why --stats could not be written last, "" if it was
};

}  // namespace bb::agent
