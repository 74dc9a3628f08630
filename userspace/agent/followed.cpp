#include "agent/followed.hpp"

#include <fmt/format.h>

#include <chrono>

#include "run/offcpu.hpp"
#include "run/options.hpp"
#include "run/reporter.hpp"
#include "run/wall_profile.hpp"
#include "sampling/wall_sampler.hpp"

namespace bb::agent {

namespace {

// -e cpu,alloc: a second session on the VM, with beam-bpf-sample -e alloc's GC entry probes
// and watchpoints, aggregated apart (its frames are its own symbolizer's). One that cannot be
// had (no debug register free, one CPU, a build without the GC entry points) is said once, and
// the VM's other profiles go on.
class AllocPart : public VmPart {
public:
    AllocPart(Followed& f, const AgentConfig& cfg) : f_(f), o_(f.o) {
        o_.event = Event::alloc;
        o_.period = cfg.alloc_period;
        o_.watchpoints_in_vm = cfg.watchpoints_in_vm;
        o_.only_erlang = true;  // the native leaf of a GC entry record is the probed entry point
        s_ = std::make_unique<Session>(o_);
        SamplerConfig sc = sampler_config(o_);
        const std::string missing = add_alloc_probes(*s_, sc);
        strata_ = AllocStrata(alloc_interval(o_), s_->alloc_exits);
        s_->start(sc,
                  fmt::format("allocation profile: {} GC entry probes, {}{}", sc.entry_probes.size(),
                              describe_event(o_),
                              missing.empty() ? "" : "; the words allocated through " + missing + " are not counted"));
    }
    const ProfileKind& kind() const override { return kind_of("words"); }
    Session* session() override { return s_.get(); }
    void drain() override {
        s_->sampler->poll(std::chrono::milliseconds(0), [&](const bb_record& r) { handle(r); });
    }
    bool has_data() const override { return agg_.total() > 0 || !strata_.empty(); }
    Aggregator& finish() override {
        strata_.drain_into(agg_, s_->sym.unsampled_alloc());
        return agg_;
    }
    void clear() override { agg_.clear(); }
    uint64_t counted() const override { return samples_; }

private:
    void handle(const bb_record& r) {
        if (r.where == BB_WHERE_CODE_EVENT) return s_->sym.code_event(r);
        Who who = who_of(r);
        if (r.flags & BB_F_ALLOC_TOTAL) return add_alloc(r, {}, who, strata_, agg_);
        if (!r.alloc_words) return;
        s_->sym.frames(r, frames_);
        f_.note_process(r);
        add_alloc(r, frames_, who, strata_, agg_);
        samples_++;
    }

    Followed& f_;
    CommonOptions o_;  // before s_, which keeps it
    std::unique_ptr<Session> s_;
    Aggregator agg_;
    AllocStrata strata_;  // its GC entries' exact words and its watchpoints' samples
    uint64_t samples_ = 0;
    std::vector<uint32_t> frames_;
};

// -e cpu,offcpu: a third session on the VM, with beam-bpf-sample -e offcpu's walker on its
// threads' switches and system calls (a walker of its own: it follows one VM's threads).
// A block is weighed by its nanoseconds, in the interval it ended in (a thread blocked across
// intervals is counted whole in the one it wakes in, as -e offcpu --every does).
class OffcpuPart : public VmPart {
public:
    OffcpuPart(Followed& f, const AgentConfig&) : f_(f), o_(f.o) {
        o_.event = Event::offcpu;
        o_.threshold_us = kOffcpuThresholdUs;
        s_ = std::make_unique<Session>(o_);
        s_->start(sampler_config(o_), describe_event(o_));
        stacks_.emplace(*s_);
    }
    const ProfileKind& kind() const override { return kind_of("offcpu"); }
    Session* session() override { return s_.get(); }
    void drain() override {
        s_->sampler->poll(std::chrono::milliseconds(0), [&](const bb_record& r) { handle(r); });
    }
    bool has_data() const override { return agg_.total() > 0; }
    Aggregator& finish() override { return agg_; }
    void clear() override { agg_.clear(); }
    uint64_t counted() const override { return blocks_; }

private:
    void handle(const bb_record& r) {
        if (r.where == BB_WHERE_CODE_EVENT) return s_->sym.code_event(r);
        if (!(r.flags & BB_F_OFFCPU)) return;
        s_->sym.frames(r, frames_);
        stacks_->stack(r, frames_, stack_);
        agg_.add(stack_, r.BB_OFFCPU_NS, f_.note_process(r));
        blocks_++;
    }

    Followed& f_;
    CommonOptions o_;
    std::unique_ptr<Session> s_;
    std::optional<OffcpuStacks> stacks_;
    Aggregator agg_;
    uint64_t blocks_ = 0;
    std::vector<uint32_t> frames_, stack_;
};

// -e cpu,wall: the VM's wall profile, read from user space through the CPU session's reader and
// symbolizer, ticked by the agent's loop, aggregated apart.
class WallPart : public VmPart {
public:
    WallPart(Followed& f, const AgentConfig&) : f_(f), profile_(*f.s, kWallProcessesPerTick, f.o.max_depth) {}
    const ProfileKind& kind() const override { return kind_of("wall"); }
    void tick(uint64_t now_ns) override {
        if (now_ns < next_tick_ns_) return;
        next_tick_ns_ = std::max(next_tick_ns_ + kTickNs, now_ns);
        profile_.tick(now_ns, [&](const bb_record& r, std::span<const uint32_t> stack, uint64_t weight) {
            // Every record is a process's (sampling/wall_sampler.hpp), on no scheduler.
            f_.names->name(r);
            if (r.reg_name) f_.registered[r.erl_pid]++;
            agg_.add(stack, weight, {r.erl_pid, 0});
        });
    }
    bool has_data() const override { return agg_.total() > 0; }
    Aggregator& finish() override { return agg_; }
    void clear() override { agg_.clear(); }
    uint64_t counted() const override { return profile_.counts().kept; }
    static constexpr uint64_t kTickNs = 1'000'000'000ull / kWallHz;

private:
    Followed& f_;
    WallProfile profile_;
    Aggregator agg_;
    uint64_t next_tick_ns_ = 0;
};

template <class Part>
std::unique_ptr<VmPart> make(Followed& f, const AgentConfig& cfg) {
    return std::make_unique<Part>(f, cfg);
}

constexpr VmPartType kTypes[] = {
    {"alloc", "allocation profile", "alloc_samples", "allocation samples aggregated (-e cpu,alloc)", 0,
     make<AllocPart>},
    {"wall", "wall profile", "wall_processes", "processes read into wall profiles (-e cpu,wall)", WallPart::kTickNs,
     make<WallPart>},
    {"offcpu", "off-CPU profile", "offcpu_blocks", "blocks of VM threads aggregated (-e cpu,offcpu)", 0,
     make<OffcpuPart>},
};

}  // namespace

std::span<const VmPartType> vm_part_types() { return kTypes; }

Who Followed::note_process(const bb_record& r) {
    const Who who = who_of(r);
    if (who.erl_pid) names->name(r);
    if (who.erl_pid && r.reg_name) registered[who.erl_pid]++;
    return who;
}

void Followed::handle(const bb_record& r) {
    if (r.where == BB_WHERE_CODE_EVENT) return s->sym.code_event(r);
    st.count(r);
    s->sym.frames(r, frames);
    const Who who = note_process(r);
    agg.add(frames, 1, who);
    if (normal_schedulers && r.sched_type == BB_SCHED_NORMAL) state_samples.add(s->sym.sched_state(r, frames));
}

std::vector<Session*> Followed::sessions() {
    std::vector<Session*> out{s.get()};
    for (auto& [type, part] : parts)
        if (Session* own = part->session()) out.push_back(own);
    return out;
}

void Followed::refresh_symbols(uint64_t now_ns) {
    for (Session* own : sessions()) own->sym.refresh(now_ns);
}

bool Followed::interval_has_data() const {
    if (agg.total() > 0) return true;
    for (const auto& [type, part] : parts)
        if (part->has_data()) return true;
    return false;
}

bool Followed::has(const VmPartType& t) const {
    for (const auto& [type, part] : parts)
        if (type == &t) return true;
    return false;
}

uint64_t Followed::counted(const VmPartType& t) const {
    for (const auto& [type, part] : parts)
        if (type == &t) return part->counted();
    return 0;
}

}  // namespace bb::agent
