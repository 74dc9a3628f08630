// beam-bpf-agent's configuration: the command line, over a key=value file (--config) that
// SIGHUP re-reads. The file's keys are the long options' names (see docs/agent.md).
#pragma once
#include <algorithm>
#include <cstdint>
#include <string_view>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/sinks.hpp"

namespace CLI {
class App;
}

namespace bb::agent {

inline constexpr const char* kDefaultOutput = "/var/lib/beam-bpf/profiles";

struct AgentConfig {
    double every = 60;  // seconds per profile
    // 99 Hz per VM thread while it runs (see docs/agent.md, Why 99 Hz).
    uint64_t frequency = 99;
    uint32_t native_depth = 64;  // native frames below the Erlang ones (0: the native leaf only)
    // -e: the kinds of profile made per VM and interval besides its CPU one, by their -e words
    // (profile/kinds.hpp), in that list's order: alloc (beam-bpf-sample -e alloc's watchpoints,
    // a debug register of each CPU per VM, so at most a few VMs at once), wall (-e wall's, at
    // its default rate and reads), offcpu (-e offcpu's at its default threshold: a walker of
    // its own per VM, on its threads' switches and calls).
    std::vector<std::string> events;
    bool has_event(std::string_view kind) const {
        return std::find(events.begin(), events.end(), kind) != events.end();
    }
    uint64_t alloc_period = 0;  // words per allocation sample on average (0: -e alloc's default)
    // Unwind rows the agent's shared store holds, all VMs together (native/unwind_store.hpp):
    // 2M rows (16 MiB, and 4 MiB of buckets) in the kernel from the first VM on. Debian's OTP 25
    // VM maps 136,202 rows, so about 15 builds whose files all differ (a VM of a build already
    // held adds none). A file that finds no room has no native frames, said in a line.
    uint32_t unwind_rows = 2u << 20;
    std::string output = kDefaultOutput;  // "none": no files
    // Profiles and stats are the agent's alone (0600 in 0700 directories), or its and this
    // group's (0640 in 0750): they name functions, processes, nodes and cgroups.
    std::string output_group;
    size_t retention = 60;                     // files kept per VM directory and kind (0: no count bound)
    uint64_t retention_bytes = 1ull << 30;     // all VMs' files together, oldest removed first
    uint64_t retention_age_s = 7 * 24 * 3600;  // files older are removed, then empty VM directories
    PushConfig push;                           // Pyroscope; push.url empty: no push
    PushConfig otlp;                           // an OTLP/HTTP receiver of profiles; otlp.url empty: none
    std::vector<std::string> match;            // RE2 patterns (linear time over target text); a VM is followed
                                               // if one is found in its command line (its first 4 KiB), node
                                               // name or cgroup path (none given: all)
    std::string stats_file;
    int metrics_port = -1;  // Prometheus text on 127.0.0.1:PORT/metrics (0: a free port; -1: none)
    std::string host;       // the host label; "" -> gethostname()
    std::string service;    // every VM's service name, over the release and node names
    std::map<std::string, std::string> service_by_node;  // service.NODE=NAME
    // Whether a name the target supplies (RELEASE_NAME in its environment, -name/-sname) may
    // become its service name; false: only service / service.NODE, else "beam.smp".
    bool target_names = true;
    bool watchpoints_in_vm = false;  // -e cpu,alloc in a virtual machine (sampling/alloc_watch.hpp)
    // Sample labels of Erlang process identity in the profiles (see docs/agent.md, Labels):
    // "none" (default), or "registered": the registered name, at most process_label_cap
    // distinct values per profile, the rest as one value.
    std::string process_labels = "none";
    size_t process_label_cap = 50;
    std::vector<std::pair<std::string, std::string>> labels;  // label.KEY=VALUE: added to every profile
    std::set<std::string> given;  // the keys set (by the file or the command line), for check()
};

// What a reload (SIGHUP) cannot change, because the running agent was made with it (its
// sampler, directory or endpoint): the reload keeps the running value and its line names the
// ones that differ, in this order, the settings of one value together ("events, alloc-period").
enum class Restart : uint8_t { no, every, frequency, native_depth, events, unwind_rows, output, metrics, end };

// One setting of the agent, as the command line (--KEY VALUE), the configuration file
// (KEY=VALUE) and a reload all see it.
struct Setting {
    const char* key;    // the file's key, and the long option's name
    const char* names;  // the option's names (CLI11's): "-F,--frequency"
    std::string help;
    void (*set)(AgentConfig& c, const std::string& key, const std::string& value);
    // Each --KEY takes one value, the next word only (--match A --match B).
    bool one_value = false;
    // Restart::no: a reload applies the new value. Else it keeps the running one: `differs` and
    // `keep` compare and copy the members the setting sets.
    struct Reload {
        Restart group = Restart::no;
        bool (*differs)(const AgentConfig& running, const AgentConfig& next) = nullptr;
        void (*keep)(const AgentConfig& running, AgentConfig& next) = nullptr;
    } reload{};
};
// Every setting, in the order of --help. The families service.NODE and label.KEY are the
// file's only (set_option takes them), not options.
const std::vector<Setting>& settings();
// The setting of `key`, nullptr if none.
const Setting* find_setting(const std::string& key);

// Options given on the command line, as key=value, in their order.
using GivenOptions = std::vector<std::pair<std::string, std::string>>;
// An option for each setting, which records what it is given in `given`.
void add_setting_options(CLI::App& app, GivenOptions& given);

// Applies the key=value lines of `path` to `c` ('#' starts a comment, blank lines are skipped).
// UserError naming the file and line for an unknown key or a bad value.
void load_config_file(const std::string& path, AgentConfig& c);
// Applies one key=value (a file line or a command-line option); UserError on a bad one.
void set_option(AgentConfig& c, const std::string& key, const std::string& value);
// Ranges and combinations; UserError.
void check(const AgentConfig& c);
// The configuration of a (re)load: `file`'s (none if ""), then the options `given` over it,
// checked. UserError naming the file's line, or the option.
AgentConfig load_config(const std::string& file, const GivenOptions& given);
// A reload's `next` configuration, with the running value of each setting a reload cannot
// change (Setting::reload); returns those that differed, as the reload's line names them.
std::vector<std::string> keep_running(const AgentConfig& running, AgentConfig& next);
// The effective configuration, one "key=value" line each (every key, defaults included): what
// --check prints. It holds no secret: credentials and headers are only named by their files.
std::string describe(const AgentConfig& c);
// A line for each file of secrets (credentials, headers, the client key) that users other than
// its owner can read or that cannot be read at all, for the start line and --check.
std::vector<std::string> secret_file_warnings(const AgentConfig& c);

}  // namespace bb::agent
