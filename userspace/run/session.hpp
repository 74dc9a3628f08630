// Attach and wiring: what beam-bpf-sample and beam-bpf-blame do before they differ. Checks
// the options and privileges, opens the output, attaches to the VM and reads its symbols;
// start() compiles native unwind tables if asked, then loads and attaches the BPF side.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "inspect/processes.hpp"
#include "native/function_search.hpp"
#include "native/unwind_table.hpp"
#include "run/options.hpp"
#include "run/output.hpp"
#include "sampling/sampler.hpp"
#include "symbols/symbolizer.hpp"
#include "target/vm.hpp"

namespace bb {

// What beam-bpf-agent's sessions share: the native unwind rows (each file's once), and one
// loaded walker that samples every VM (a slot each).
struct SharedSampling {
    std::optional<SharedUnwind> unwind;  // set by the agent when native frames are walked
    std::shared_ptr<Walker> walker;      // loaded by the first session started, with max_vms slots
    uint32_t max_vms = 1;
};

// Built in place: the symbolizer and sampler keep references to the Vm.
class Session {
public:
    explicit Session(CommonOptions& o);  // resolves o
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;
    // `what` ends the attach line (how it samples). With `shared` (the agent's), the VM is
    // sampled by the shared walker and its native unwind rows go to the shared store; else the
    // session has its own of both.
    void start(SamplerConfig cfg, const std::string& what, SharedSampling* shared = nullptr);
    // A store of one VM's own: room for 1M rows (8 MiB in the kernel, and 2 MiB of buckets),
    // seven times what Debian's OTP 25 VM maps: NIF libraries loaded later fit.
    static constexpr uint32_t kOwnUnwindRows = 1u << 20;

    StageTimes attach_times;  // each step from the VM's checks to the walker attached (-v, --stats)
    Output out;
    Vm vm;
    Symbolizer sym;
    ProcessNames names;
    std::optional<uint64_t> only_pid;    // --process, as a masked pid term (filtered in BPF)
    SharedUnwind unwind_store;           // where `unwind` places its rows (before it: outlives it)
    std::optional<NativeUnwind> unwind;  // native unwind tables, when native frames are walked
    std::optional<Sampler> sampler;
    uint64_t start_ns = 0, start_unix_ns = 0;  // monotonic and wall clock when sampling started
    std::vector<uint64_t> alloc_exits;         // -e alloc: where the exit probe is (add_alloc_probes())
    bool verbose = false;                      // -v: the attach line in full
};

// The attach line without -v, at most about 120 columns: pid, node, release, then `what` (how
// it samples) and `native` (", Erlang frames only" where no native frame is walked, else "");
// `events_note` (Sampler::events_note()), when not empty, on a line of its own. -v gives the
// rest: path, build-id, where the offsets and symbols came from, JIT modules, unwind tables.
void print_attached(const Vm& vm, std::string_view native, std::string_view what, std::string_view events_note = {});

// An entry probe on a native function, for SamplerConfig::entry_probes.
SamplerConfig::Probe entry_probe(const Vm& vm, const NativeMatch& m);
// -e alloc's probes: an entry probe on each of the release's GC entry points (and, with
// watchpoints, a return probe for the coin flip, and an entry probe where a process exits, whose
// addresses go to s.alloc_exits), and one on erts_heap_alloc. UserError if the build lacks the
// first entry point; returns the others it lacks ("" if none): a release that renamed one loses
// the words allocated through it, which the caller says.
std::string add_alloc_probes(Session& s, SamplerConfig& cfg);

}  // namespace bb
