#include "agent/agent.hpp"

#include <fmt/format.h>
#include <malloc.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "agent/followed.hpp"
#include "agent/push_protocol.hpp"
#include "base/clock.hpp"
#include "base/text.hpp"
#include "profile/aggregate.hpp"
#include "report/otlp.hpp"
#include "report/pprof.hpp"
#include "report/report.hpp"
#include "run/offcpu.hpp"
#include "run/options.hpp"
#include "run/output.hpp"
#include "run/reporter.hpp"
#include "run/run_stats.hpp"
#include "run/session.hpp"
#include "sampling/counters.hpp"
#include "target/node_name.hpp"

namespace bb::agent {

namespace {

constexpr uint64_t kSecond = 1'000'000'000ull;
// A VM that cannot be attached at its first sight may be too young (its schedulers and JIT
// not up yet): tried again each scan for this long before it is refused.
constexpr uint64_t kAttachRetryNs = 5 * kSecond;
// VMs the one walker samples at most (a slot each: 7 KiB of kernel memory, 1.7 MiB in all,
// allocated when the walker is loaded). A VM past them is refused.
constexpr uint32_t kMaxVms = 256;
// The directory's bounds in bytes and age are enforced this often (and the count at each write).
constexpr uint64_t kSweepNs = 10 * kSecond;

void log(const std::string& line) { fmt::print(stderr, "beam-bpf-agent: {}\n", line); }

// A directory name from a service name: [A-Za-z0-9_.@-], never starting with a dot.
std::string dir_safe(const std::string& s) {
    std::string out = s.substr(0, 128);
    for (char& c : out)
        if (!std::isalnum(static_cast<unsigned char>(c)) && !std::strchr("_.@-", c)) c = '_';
    if (out.empty() || out[0] == '.') out.insert(out.begin(), '_');
    return out;
}

// A store's pusher after a reload: started, reconfigured, or stopped (dropping what it held:
// said in the reload line).
void reload_pusher(std::unique_ptr<Pusher>& p, const PushConfig& cfg, std::unique_ptr<PushProtocol> (*protocol)()) {
    if (cfg.url.empty()) p.reset();
    else if (p) p->reconfigure(cfg);
    else p = std::make_unique<Pusher>(protocol(), cfg);
}

Retention retention_of(const AgentConfig& c) { return {c.retention, c.retention_bytes, c.retention_age_s}; }

uint64_t rss_kib() {
    std::ifstream f("/proc/self/statm");
    uint64_t size = 0, resident = 0;
    f >> size >> resident;
    return resident * static_cast<uint64_t>(sysconf(_SC_PAGESIZE)) / 1024;
}

}  // namespace

std::string service_name(const AgentConfig& cfg, const VmLabels& l, std::string* source) {
    if (source) source->clear();
    // service.NODE= as node() prints it, or its short name ("shop" for shop@vm).
    if (auto it = cfg.service_by_node.find(l.node); !l.node.empty() && it != cfg.service_by_node.end())
        return it->second;
    for (const auto& [node, service] : cfg.service_by_node)
        if (node_matches(l.node, node)) return service;
    if (!cfg.service.empty()) return cfg.service;
    // Any local user can start a beam.smp that calls itself anything: a name the target chose is
    // used only if allowed, and says where it came from.
    if (cfg.target_names && (!l.release.empty() || !l.node.empty())) {
        if (source) *source = l.release.empty() ? "node name" : "release name";
        return l.release.empty() ? l.node : l.release;
    }
    return "beam.smp";
}

std::unordered_map<uint64_t, std::string> registered_labels(const std::unordered_map<uint64_t, uint64_t>& samples,
                                                            const std::function<std::string(uint64_t)>& name,
                                                            size_t cap) {
    std::map<std::string, uint64_t> by_name;
    for (const auto& [pid, n] : samples)
        if (std::string text = name(pid); !text.empty()) by_name[text] += n;
    // The most sampled names, ties by name: the same VM gives the same labels.
    std::vector<std::pair<std::string, uint64_t>> ranked(by_name.begin(), by_name.end());
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
    if (ranked.size() > cap) ranked.resize(cap);
    std::set<std::string> kept;
    for (const auto& [text, n] : ranked) kept.insert(text);
    std::unordered_map<uint64_t, std::string> out;
    for (const auto& [pid, n] : samples)
        if (std::string text = name(pid); kept.count(text)) out.emplace(pid, std::move(text));
    return out;
}

VmLabelSets label_sets(const VmLabels& l, const std::string& service, const std::string& service_source,
                       const std::string& host, pid_t os_pid, pid_t ns_pid, int otp_release,
                       const std::string& erts_version, const Labels& configured) {
    VmLabelSets out;
    out.series = {{"service_name", service},
                  {"service_source", service_source.empty() ? "" : "target"},
                  {"host", host},
                  {"node", l.node},
                  {"release", l.release},
                  {"otp_release", std::to_string(otp_release)},
                  {"erts_version", erts_version},
                  // A Deployment's pods are renamed at each restart, their namespace is not.
                  {"k8s_namespace", l.pod_namespace}};
    for (const auto& kv : configured) out.series.push_back(kv);
    for (const auto& [k, v] : out.series) out.resource.emplace_back(k == "k8s_namespace" ? "k8s.namespace.name" : k, v);
    // Keys otlp_resource maps to the semantic conventions' names, or already those names.
    const Labels per_restart{{"os_pid", std::to_string(os_pid)},
                             {"ns_pid", ns_pid && ns_pid != os_pid ? std::to_string(ns_pid) : ""},
                             {"container_id", l.container_id},
                             {"cgroup", l.cgroup},  // holds the container id and the pod uid
                             {"k8s.pod.name", l.pod_name},
                             {"k8s.pod.uid", l.pod_uid}};
    out.resource.insert(out.resource.end(), per_restart.begin(), per_restart.end());
    return out;
}

Agent::Agent(AgentConfig cfg) : matcher_(cfg.match) {
    check(cfg);
    shared_.max_vms = kMaxVms;
    if (cfg.host.empty()) {
        char h[256] = {};
        gethostname(h, sizeof h - 1);
        host_ = clean(h);
    }
    if (cfg.output != "none") {
        dir_.emplace(cfg.output, retention_of(cfg), cfg.output_group);
        if (!dir_->warning().empty()) log("warning: " + dir_->warning());
    }
    reload_pusher(pusher_, cfg.push, pyroscope_protocol);
    reload_pusher(otlp_, cfg.otlp, otlp_protocol);
    if (cfg.metrics_port >= 0) {
        metrics_ = std::make_unique<MetricsEndpoint>(static_cast<uint16_t>(cfg.metrics_port));
        log(fmt::format("metrics on http://127.0.0.1:{}/metrics", metrics_->port()));
    }
    cfg_ = std::move(cfg);
    if (!cfg_.host.empty()) host_ = clean(cfg_.host);
}

Agent::~Agent() = default;

bool Agent::wanted(const BeamProcess& p, const VmLabels& l) const { return matcher_.wanted(p, l); }

void Agent::scan(uint64_t now_ns) {
    std::vector<BeamProcess> beams = find_beams();
    std::set<Key> present;
    for (const BeamProcess& p : beams) present.insert({p.pid, p.start_time});
    // Gone first: a pid reused by a new VM is a new VM.
    for (auto it = vms_.begin(); it != vms_.end();) {
        pid_t pid = it->first;
        ++it;
        const Followed& f = *vms_.at(pid);
        if (!present.count({pid, f.proc.start_time})) detach(pid, "the VM exited");
    }
    for (const BeamProcess& p : beams) {
        Key k{p.pid, p.start_time};
        if (vms_.count(p.pid) || refused_.count(k)) continue;
        VmLabels l = labels_of(p);
        if (auto it = ignored_.find(k); it != ignored_.end() && it->second == l.node) continue;
        if (!wanted(p, l)) {
            ignored_[k] = l.node;
            log(fmt::format("ignored pid {} (node {}, cgroup {}): it matches no --match", p.pid,
                            l.node.empty() ? "-" : l.node, l.cgroup.empty() ? "-" : l.cgroup));
            continue;
        }
        attach(p, now_ns);
    }
    // What is remembered of VMs not followed stays bounded by the VMs that exist.
    std::erase_if(refused_, [&](const Key& k) { return !present.count(k); });
    std::erase_if(ignored_, [&](const auto& kv) { return !present.count(kv.first); });
    std::erase_if(first_failure_ns_, [&](const auto& kv) { return !present.count(kv.first); });
}

void Agent::attach(const BeamProcess& p, uint64_t now_ns) {
    Key k{p.pid, p.start_time};
    auto f = std::make_unique<Followed>();
    f->proc = p;
    f->labels = labels_of(p);
    // POD_NAME and POD_NAMESPACE are the target's environment: as much its say as its release name.
    if (!cfg_.target_names) f->labels.pod_name.clear(), f->labels.pod_namespace.clear();
    f->o.pid = p.pid;
    f->o.frequency = cfg_.frequency;
    f->o.native_depth = cfg_.native_depth;
    f->o.verbose = true;         // its attach lines are a log's: in full (what the VM is and how it is read)
    f->o.wait_for_boot = false;  // a VM caught starting is tried at the next scan, the others not held up
    const VmLabels& l = f->labels;
    try {
        f->s = std::make_unique<Session>(f->o);
        // Created at the first attach that needs it, for every VM after: each file's rows are
        // held once (native/unwind_store.hpp).
        if (cfg_.native_depth && !shared_.unwind) shared_.unwind = SharedUnwind::create(cfg_.unwind_rows);
        std::string source;
        const std::string service = service_of(l, &source);
        f->s->start(sampler_config(f->o),
                    fmt::format("node {}, service {}{}, cgroup {}{}{}; {}", l.node.empty() ? "-" : l.node, service,
                                source.empty() ? "" : " (from the target's " + source + ")",
                                l.cgroup.empty() ? "-" : l.cgroup,
                                l.container_id.empty() ? "" : ", container " + l.container_id.substr(0, 12),
                                l.pod_name.empty() && l.pod_uid.empty()
                                    ? ""
                                    : fmt::format(", pod {}/{} ({})", l.pod_namespace.empty() ? "-" : l.pod_namespace,
                                                  l.pod_name.empty() ? "-" : l.pod_name,
                                                  l.pod_uid.empty() ? "-" : l.pod_uid),
                                describe_event(f->o)),
                    &shared_);
    } catch (const std::exception& e) {
        auto [it, first] = first_failure_ns_.try_emplace(k, now_ns);
        if (now_ns - it->second < kAttachRetryNs && p.pid != getpid()) return;  // young: next scan
        refused_.insert(k);
        first_failure_ns_.erase(k);
        c_.vms_refused++;
        log(fmt::format("refused pid {} (node {}): {}", p.pid, l.node.empty() ? "-" : l.node, clean(e.what(), 1024)));
        return;
    }
    first_failure_ns_.erase(k);
    // Each other kind of profile asked for is an extra: one the VM cannot have (no debug
    // register free, a kernel without BTF tracepoints, a layout that does not read) is said
    // once, and its other profiles go on.
    for (const VmPartType& t : vm_part_types()) {
        if (!cfg_.has_event(t.kind)) continue;
        try {
            f->parts.emplace_back(&t, t.make(*f, cfg_));
        } catch (const std::exception& e) {
            size_t with = 0;  // an allocation profile takes a debug register of every CPU: 4 VMs at most
            for (const auto& [pid, g] : vms_) with += g->has(t);
            log(fmt::format("pid {}: no {} ({} VMs have one): {}", p.pid, t.what, with, clean(e.what(), 1024)));
        }
    }
    f->names.emplace(f->s->vm, false);
    f->normal_schedulers = split_schedulers(f->s->vm, f->o);  // the schedulers' split, as beam-bpf-sample's
    f->sched = std::make_shared<SchedUtil>(f->s->vm);
    sched_.add(p.pid, f->sched);
    f->interval_start_ns = f->s->start_ns;
    f->interval_start_unix_ns = f->s->start_unix_ns;
    f->last_check_ns = monotonic_ns();
    c_.vms_attached++;
    vms_.emplace(p.pid, std::move(f));
}

void Agent::step(Followed& f, uint64_t now_ns) {
    if (now_ns - f.last_check_ns >= kSecond) {
        f.last_check_ns = now_ns;
        // A VM attached as it started may not have registered init yet: names from when it has.
        // (Names unavailable for a lasting reason, a layout that does not read, are not retried.)
        if (f.names->starting()) f.names.emplace(f.s->vm, false);
        for (Session* s : f.sessions()) {
            s->sampler->refresh_vm_state();
            const auto& keys = f.names->dictionary_keys();  // met only where names are read (--process-labels)
            s->sampler->set_dictionary_keys(keys.initial_call, keys.callers);
            // A lost code event leaves the index behind: back to walking the list.
            if (s->sampler->counters().bpf[BB_C_CODE_EVENTS_LOST]) s->sym.follow_code_events(false, now_ns);
        }
    }
    f.refresh_symbols(now_ns);
    for (auto& [type, part] : f.parts) part->tick(now_ns);
}

void Agent::drain() {
    if (shared_.walker)
        shared_.walker->poll(
            std::chrono::milliseconds(0),
            [&](const bb_record& r) {
                auto it = vms_.find(static_cast<pid_t>(r.tgid));
                if (it == vms_.end()) c_.orphaned++;
                else it->second->handle(r);
            },
            false);
    for (auto& [pid, f] : vms_)
        for (auto& [type, part] : f->parts) part->drain();
}

void Agent::finish_interval(Followed& f, uint64_t now_ns) {
    // A node that started distribution since the last interval (net_kernel:start/2, RabbitMQ)
    // is filed under its name from this profile on.
    if (auto node = node_name_in_memory(f.proc.pid, f.proc.start_time);
        node && !node->empty() && *node != f.labels.node) {
        log(fmt::format("pid {} is node {} (was {})", f.proc.pid, clean(*node),
                        f.labels.node.empty() ? "-" : f.labels.node));
        f.labels.node = clean(*node);
        f.labels.node_from_command_line = false;
    }
    // Named at its first profile, not at attach: a VM attached as it boots (before its
    // distribution is up, or RabbitMQ's) is filed under the name node() gives it.
    if (f.dir_name.empty()) f.dir_name = dir_safe(service_of(f.labels)) + "-" + std::to_string(f.proc.pid);
    ship(f, kind_of("samples"), *f.s, f.agg, now_ns);
    f.agg.clear();
    for (auto& [type, part] : f.parts) {
        // Its frames are those of its own session's symbolizer, if it has one.
        Session* own = part->session();
        ship(f, part->kind(), own ? *own : *f.s, part->finish(), now_ns);
        part->clear();
    }
    f.util = f.sched->take();
    f.states.reset();
    if (f.state_samples.total())
        f.states = f.state_samples.shares(f.o.ns_per_sample, now_ns - f.interval_start_ns, f.normal_schedulers);
    f.state_samples.clear();
    if (!told_sched_priority_ && !preempts_at_once(sched_.priority())) {
        told_sched_priority_ = true;
        log(
            fmt::format("warning: scheduler utilization is sampled at {} priority (real time is refused here): on "
                        "CPUs the busy schedulers fill it may read a few points low",
                        wakeup_priority_name(sched_.priority())));
    }
    f.names.emplace(f.s->vm, false);
    f.registered.clear();
    f.interval_start_unix_ns += now_ns - f.interval_start_ns;
    f.interval_start_ns = now_ns;
    f.profiles++;
}

void Agent::ship(Followed& f, const ProfileKind& kind, Session& s, const Aggregator& agg, uint64_t now_ns) {
    const VmLabels& l = f.labels;
    std::string source;
    const std::string service = service_of(l, &source);
    ProfileMeta m;
    m.title = fmt::format("{} {} (OTP {}){}{}", s.vm.exe(), s.vm.pid(), s.vm.release().major,
                          l.node.empty() ? "" : " node " + l.node, kind.title);
    // As beam-bpf-sample's reports: a CPU sample stands for 1/F s; an allocation one weighs
    // words; a wall one nanoseconds of process time; an off-CPU one nanoseconds a thread blocked.
    m.unit = kind.unit;
    m.period_ns = kind.period_type.empty() ? 0 : f.o.ns_per_sample;
    m.start_unix_ns = f.interval_start_unix_ns;
    m.duration_ns = now_ns - f.interval_start_ns;
    // Sample labels: Pyroscope makes a series of each distinct set of them, so by default none
    // of process identity (pid and scheduler labels made a series of nearly every sample).
    std::unordered_map<uint64_t, std::string> process_label;
    if (cfg_.process_labels == "registered") {
        process_label = registered_labels(
            f.registered, [&](uint64_t pid) { return f.names->known(pid); }, cfg_.process_label_cap);
        m.process_text = [&](uint64_t pid) {
            auto it = process_label.find(pid);
            return it == process_label.end() ? std::string("other") : it->second;
        };
    }
    Profile prof = agg.profile(s.sym.frames(), m);

    const VmLabelSets sets = label_sets(l, service, source, host_, f.proc.pid, f.proc.ns_pid, s.vm.build().otp_release,
                                        s.vm.build().erts_version, cfg_.labels);
    FinishedProfile fp;
    fp.kind = kind.agent_name;
    fp.dir_name = f.dir_name;
    fp.service = service;
    fp.labels = sets.series;
    // Every sample carries them too (the files say whose they are): no series more.
    for (const auto& [k, v] : fp.labels)
        if (!v.empty()) prof.labels.emplace_back(k, v);
    fp.start_unix_ns = m.start_unix_ns;
    fp.end_unix_ns = m.start_unix_ns + m.duration_ns;
    fp.frequency_hz = cfg_.frequency;
    std::ostringstream os;
    // Names come from the target: escaped as every report escapes them (report.hpp).
    write_report(prof, Format::pprof, os, {});
    fp.pprof_gz = std::move(os).str();
    // Gzipped (OTLP/HTTP's Content-Encoding: gzip), in the queue too: 40% of the bytes of small profiles.
    if (otlp_) fp.otlp = gzip(otlp_request(prof, otlp_resource(sets.resource)));
    c_.profiles++;
    if (dir_) {
        try {
            dir_->write(fp);
        } catch (const std::exception& e) {
            c_.write_errors++;
            log(fmt::format("pid {}: {}", f.proc.pid, e.what()));
        }
    }
    for (Pusher* p : {pusher_.get(), otlp_.get()})
        if (p) p->enqueue(fp);  // never waits for the network
}

void Agent::detach(pid_t pid, const std::string& why) {
    auto it = vms_.find(pid);
    if (it == vms_.end()) return;
    Followed& f = *it->second;
    std::string err;
    try {
        // The last interval, partial: what the walker emitted before the VM went.
        for (Session* s : f.sessions()) s->sampler->stop_events();
        f.refresh_symbols(monotonic_ns());
        drain();  // every VM's records: this one's are all in the ring now
        if (f.interval_has_data()) finish_interval(f, monotonic_ns());
    } catch (const std::exception& e) {
        err = fmt::format(" (its last interval is lost: {})", e.what());
    }
    const uint64_t dropped = f.s->sampler->counters().bpf[BB_C_DROPPED];
    c_.ring_dropped += dropped;
    c_.samples += f.st.records;
    for (const VmPartType& t : vm_part_types()) c_.counted[t.counter] += f.counted(t);
    c_.vms_detached++;
    const std::string line = fmt::format("detached pid {} (node {}): {}; {} samples, {} dropped, in {} profiles{}", pid,
                                         f.labels.node.empty() ? "-" : f.labels.node, why, f.st.records, dropped,
                                         f.profiles, err);
    sched_.remove(pid);
    vms_.erase(it);  // the Session: sampler (BPF objects, perf events, ring), tables, symbols
    // What the VM held goes back to the system, not only to malloc's free lists: RSS follows the
    // VMs followed now, not the most ever followed at once (an hour's soak beside a CI run kept
    // the 15% it took while 5 VMs were followed instead of 3).
    malloc_trim(0);
    log(line);  // once they are released: a reader of the line may count them
}

void Agent::apply(AgentConfig cfg) {
    check(cfg);
    Matcher matcher(cfg.match);
    // What the sampler, the directory and the endpoint were made with stays (config.hpp, Restart).
    const std::vector<std::string> kept = keep_running(cfg_, cfg);
    reload_pusher(pusher_, cfg.push, pyroscope_protocol);
    reload_pusher(otlp_, cfg.otlp, otlp_protocol);
    if (dir_) dir_->set_retention(retention_of(cfg));
    cfg_ = std::move(cfg);
    matcher_ = std::move(matcher);
    host_ = cfg_.host.empty() ? host_ : clean(cfg_.host);
    log(fmt::format("configuration reloaded{}",
                    kept.empty() ? "" : "; needs a restart to change: " + fmt::format("{}", fmt::join(kept, ", "))));
    std::vector<pid_t> unwanted;
    for (const auto& [pid, f] : vms_)
        if (!wanted(f->proc, f->labels)) unwanted.push_back(pid);
    for (pid_t pid : unwanted) detach(pid, "it no longer matches --match");
    ignored_.clear();  // looked at again at the next scan
}

void Agent::write_stats() const {
    if (cfg_.stats_file.empty() && !metrics_) return;
    AgentCounters c = c_;
    nlohmann::json vms = nlohmann::json::array();
    for (const auto& [pid, f] : vms_) {
        SamplerCounters sc = f->s->sampler->counters();
        c.samples += f->st.records;
        c.ring_dropped += sc.bpf[BB_C_DROPPED];
        nlohmann::json vm = {{"os_pid", pid},
                             {"node", f->labels.node},
                             {"service", service_of(f->labels)},
                             {"samples", f->st.records},
                             {kCounters[BB_C_DROPPED].key, sc.bpf[BB_C_DROPPED]},
                             {"profiles", f->profiles},
                             {"events", sc.events},
                             {"unwind_rows", f->s->unwind ? f->s->unwind->rows() : 0},
                             {"schedulers", sched_json(f->util)}};
        if (f->states) {
            nlohmann::json states = nlohmann::json::object();
            for (size_t i = 0; i < kSchedStates; i++) states[std::string(kSchedStateNames[i])] = (*f->states)[i];
            vm["scheduler_states"] = states;
        }
        for (const VmPartType& t : vm_part_types()) {
            vm[t.counter] = f->counted(t);
            c.counted[t.counter] += f->counted(t);
        }
        vms.push_back(std::move(vm));
    }
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    nlohmann::json j = {
        {"vms_followed", vms_.size()},
        {"sched_sampler", wakeup_priority_name(sched_.priority())},
        {"rss_kib", rss_kib()},
        {"peak_rss_kib", ru.ru_maxrss},
        {"user_cpu_s", ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6},
        {"sys_cpu_s", ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6},
        {"vms", vms},
    };
#define BB_AGENT_COUNTER_JSON(name, help) j[#name] = c.name;
    BB_AGENT_COUNTERS(BB_AGENT_COUNTER_JSON)
#undef BB_AGENT_COUNTER_JSON
    for (const VmPartType& t : vm_part_types()) j[t.counter] = c.counted[t.counter];
    // The unwind rows every VM shares (native/unwind_store.hpp); none before the first attach.
    UnwindStore::Stats us = shared_.unwind ? shared_.unwind->store->stats() : UnwindStore::Stats{};
    j["unwind_store"] = {{"kernel_bytes", us.kernel_bytes()},  {"row_capacity", us.row_capacity},
                         {"rows_used", us.rows_used},          {"bucket_capacity", us.bucket_capacity},
                         {"buckets_used", us.buckets_used},    {"regions", us.regions},
                         {"module_entries", us.shares},        {"tables", us.tables},
                         {"tables_compiled", us.compiled},     {"tables_reused", us.table_reuses},
                         {"regions_reused", us.region_reuses}, {"refused", us.refused}};
    // Each store's counters: Pyroscope's unprefixed (as they were before OTLP), OTLP's "otlp_".
    const std::pair<std::string, const Pusher*> stores[] = {{"", pusher_.get()}, {"otlp_", otlp_.get()}};
    for (const auto& [prefix, pusher] : stores) {
        PushCounters pc = pusher ? pusher->counters() : PushCounters{};
        j[prefix + "pushes"] = pc.pushed;
        j[prefix + "push_failures"] = pc.failures;
        j[prefix + "push_dropped"] = pc.dropped;
        j[prefix + "push_rejected"] = pc.rejected;
        j[prefix + "push_given_up"] = pc.given_up;
        j[prefix + "push_last_error"] = pc.last_error;
        j[prefix + "queue_bytes"] = pc.queue_bytes;
        j[prefix + "queue_profiles"] = pc.queue_profiles;
    }
    if (metrics_) {
        // Prometheus' text format: the same figures, counters with _total.
        std::string text;
        auto metric = [&](const std::string& name, const char* type, const std::string& help, const nlohmann::json& v) {
            text +=
                fmt::format("# HELP beam_bpf_agent_{0} {1}\n# TYPE beam_bpf_agent_{0} {2}\nbeam_bpf_agent_{0} {3}\n",
                            name, help, type, v.dump());
        };
        metric("vms_followed", "gauge", "VMs followed now", j["vms_followed"]);
#define BB_AGENT_COUNTER_METRIC(name, help) metric(#name "_total", "counter", help, j[#name]);
        BB_AGENT_COUNTERS(BB_AGENT_COUNTER_METRIC)
#undef BB_AGENT_COUNTER_METRIC
        for (const VmPartType& t : vm_part_types())
            metric(std::string(t.counter) + "_total", "counter", t.help, j[t.counter]);
        for (const auto& [p, pusher] : stores) {
            const std::string store = p.empty() ? "Pyroscope" : "the OTLP receiver";
            metric(p + "pushes_total", "counter", "profiles accepted by " + store, j[p + "pushes"]);
            metric(p + "push_failures_total", "counter", "push attempts to " + store + " that failed",
                   j[p + "push_failures"]);
            metric(p + "push_dropped_total", "counter", "profiles dropped from the full queue to " + store,
                   j[p + "push_dropped"]);
            metric(p + "push_rejected_total", "counter", "profiles " + store + " refused (not sent again)",
                   j[p + "push_rejected"]);
            metric(p + "push_given_up_total", "counter", "profiles given up after their tries or age",
                   j[p + "push_given_up"]);
            metric(p + "queue_bytes", "gauge", "bytes of profiles waiting for " + store, j[p + "queue_bytes"]);
            metric(p + "queue_profiles", "gauge", "profiles waiting for " + store, j[p + "queue_profiles"]);
        }
        // Each VM's schedulers over its last interval: a series per scheduler, labelled as the VM's
        // profiles are named (its node and service are the target's say: escaped).
        text +=
            "# HELP beam_bpf_agent_scheduler_busy_ratio share of the VM's last interval each scheduler was "
            "busy, as erlang:statistics(scheduler_wall_time) counts it (spinning is idle)\n"
            "# TYPE beam_bpf_agent_scheduler_busy_ratio gauge\n";
        for (const auto& vm : j["vms"])
            for (const auto& b : vm["schedulers"])
                text += fmt::format(
                    "beam_bpf_agent_scheduler_busy_ratio{{pid=\"{}\",node=\"{}\",service=\"{}\",type=\"{}\","
                    "scheduler=\"{}\"}} {}\n",
                    vm["os_pid"].get<int>(), prometheus_label(vm["node"]), prometheus_label(vm["service"]),
                    b["type"].get<std::string>(), b["no"].get<int>(), b["busy"].get<double>());
        text +=
            "# HELP beam_bpf_agent_scheduler_state_ratio share of the VM's last interval its normal schedulers "
            "spent in each of msacc's states, from the CPU samples (sleep: the rest, off the CPU)\n"
            "# TYPE beam_bpf_agent_scheduler_state_ratio gauge\n";
        for (const auto& vm : j["vms"])
            if (vm.contains("scheduler_states"))
                for (const auto& [state, share] : vm["scheduler_states"].items())
                    text += fmt::format(
                        "beam_bpf_agent_scheduler_state_ratio{{pid=\"{}\",node=\"{}\",service=\"{}\",state=\"{}\"}} "
                        "{}\n",
                        vm["os_pid"].get<int>(), prometheus_label(vm["node"]), prometheus_label(vm["service"]), state,
                        share.get<double>());
        metric("unwind_rows_used", "gauge", "native unwind rows held for all VMs, each file's once",
               j["unwind_store"]["rows_used"]);
        metric("rss_bytes", "gauge", "the agent's resident memory",
               nlohmann::json(j["rss_kib"].get<uint64_t>() * 1024));
        metrics_->set(std::move(text));
    }
    if (cfg_.stats_file.empty()) return;
    // Whole or not at all: a reader never sees half a file. As private as the profiles.
    std::string error;
    try {
        write_file_atomically(cfg_.stats_file, json_text(j, 2) + "\n", dir_ ? dir_->file_access() : FileAccess{0600});
    } catch (const UserError& e) {
        error = e.what();  // a full disk must not stop the profiling; the next second tries again
    }
    // Said when it starts failing, when the reason changes, and when it works again.
    if (error != stats_error_) log(error.empty() ? fmt::format("--stats {} written again", cfg_.stats_file) : error);
    stats_error_ = error;
}

void Agent::run(const std::atomic<bool>& stop, std::atomic<bool>& reload,
                const std::function<AgentConfig()>& reconfigure) {
    uint64_t last_scan = 0, last_stats = 0, last_sweep = 0;
    while (!stop) {
        uint64_t now = monotonic_ns();
        if (reload.exchange(false)) {
            try {
                apply(reconfigure());
            } catch (const std::exception& e) {
                log(fmt::format("reload failed, the configuration is unchanged: {}", e.what()));
            }
        }
        if (now - last_scan >= kSecond) {
            last_scan = now;
            scan(now);
        }
        std::vector<pid_t> pids;
        for (const auto& [pid, f] : vms_) pids.push_back(pid);
        for (pid_t pid : pids) {
            try {
                step(*vms_.at(pid), monotonic_ns());
            } catch (const std::exception& e) {
                detach(pid, fmt::format("stopped following it: {}", e.what()));
            }
        }
        try {
            drain();
        } catch (const std::exception& e) {
            log(fmt::format("reading the samples: {}", e.what()));
        }
        const uint64_t every_ns = static_cast<uint64_t>(cfg_.every * 1e9);
        for (pid_t pid : pids) {
            auto it = vms_.find(pid);
            if (it == vms_.end() || monotonic_ns() - it->second->interval_start_ns < every_ns) continue;
            try {
                finish_interval(*it->second, monotonic_ns());
            } catch (const std::exception& e) {
                detach(pid, fmt::format("stopped following it: {}", e.what()));
            }
        }
        if (now - last_stats >= kSecond) {
            last_stats = now;
            write_stats();
        }
        if (dir_ && now - last_sweep >= kSweepNs) {
            last_sweep = now;
            std::set<std::string> live;
            for (const auto& [pid, f] : vms_)
                if (!f->dir_name.empty()) live.insert(f->dir_name);  // none before its first profile
            dir_->sweep(live, static_cast<int64_t>(unix_now_ns() / kSecond));
        }
        // Rings hold seconds of samples at these rates: a drain every 100 ms is plenty. The wall
        // profiles tick at their own rate.
        uint64_t sleep_ns = 100'000'000;
        for (const VmPartType& t : vm_part_types())
            if (t.tick_ns && cfg_.has_event(t.kind)) sleep_ns = std::min(sleep_ns, t.tick_ns);
        timespec ts{0, static_cast<long>(sleep_ns)};
        nanosleep(&ts, nullptr);
    }
    // The agent is gone within 5 s of SIGTERM whatever the stores do: the VMs' last intervals,
    // then both queues' last pushes until 3.5 s after the signal (their threads send at the same
    // time), then a request still in flight is aborted (libcurl checks within a second).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(3500);
    std::vector<pid_t> pids;
    for (const auto& [pid, f] : vms_) pids.push_back(pid);
    for (pid_t pid : pids) detach(pid, "the agent stops");
    std::string sent;
    for (const auto& [name, p] : {std::pair{"", pusher_.get()}, std::pair{" to OTLP", otlp_.get()}}) {
        if (!p) continue;
        p->flush(std::max(std::chrono::milliseconds(0), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                            deadline - std::chrono::steady_clock::now())));
        PushCounters pc = p->counters();
        sent += fmt::format(
            ", {} pushed{}, {} push failures, {} dropped from the queue, {} rejected, {} given up, {} left unsent",
            pc.pushed, name, pc.failures, pc.dropped, pc.rejected, pc.given_up, pc.queue_profiles);
    }
    write_stats();
    log(fmt::format("stopped: {} profiles{}", c_.profiles, sent));
}

}  // namespace bb::agent
