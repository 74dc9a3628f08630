#include "agent/config.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "agent/matcher.hpp"
#include "base/closest.hpp"
#include "base/error.hpp"
#include "base/text.hpp"
#include "beam_bpf.h"
#include "profile/kinds.hpp"

namespace bb::agent {

namespace {

// The agent's -e words besides cpu (profile/kinds.hpp), in the list's order.
std::vector<std::string> extra_kinds() {
    std::vector<std::string> words;
    for (const ProfileKind& k : profile_kinds())
        if (!k.agent_name.empty() && k.agent_name != "cpu") words.emplace_back(k.agent_name);
    return words;
}

// ... as a list: "alloc, wall and offcpu".
std::string extra_events(const char* sep, const char* last) { return join(extra_kinds(), sep, last); }

template <typename T>
T number(const std::string& key, const std::string& v) {
    T out{};
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec != std::errc() || end != v.data() + v.size()) throw UserError(fmt::format("{}={}: not a number", key, v));
    // from_chars reads "nan" and "inf": neither is a time.
    if constexpr (std::is_floating_point_v<T>)
        if (!std::isfinite(out)) throw UserError(fmt::format("{}={}: not a finite number", key, v));
    return out;
}

bool boolean(const std::string& key, const std::string& v) {
    if (v == "true" || v == "yes" || v == "1") return true;
    if (v == "false" || v == "no" || v == "0") return false;
    throw UserError(fmt::format("{}={}: true or false", key, v));
}

std::string trim(const std::string& s) {
    size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

template <typename T>
void in_range(const char* option, T v, T lo, T hi, const char* unit) {
    if (v < lo || v > hi) throw UserError(fmt::format("--{} {}: {} to {} {}", option, v, lo, hi, unit));
}

// The settings that only mean something with another one, and that other one.
constexpr std::pair<const char*, const char*> kNeeds[] = {
    {"push-auth", "push"}, {"push-tenant", "push"},       {"push-headers-file", "push"},
    {"otlp-auth", "otlp"}, {"otlp-headers-file", "otlp"}, {"process-label-cap", "process-labels"},
};

using Text = const std::string&;

template <auto M>
void set_number(AgentConfig& c, Text key, Text v) {
    c.*M = number<std::remove_reference_t<decltype(c.*M)>>(key, v);
}
template <auto M>
void set_text(AgentConfig& c, Text, Text v) {
    c.*M = v;
}
// A setting a reload keeps: the running value of member M.
template <auto M>
constexpr Setting::Reload fixed(Restart group) {
    return {group, [](const AgentConfig& running, const AgentConfig& next) { return running.*M != next.*M; },
            [](const AgentConfig& running, AgentConfig& next) { next.*M = running.*M; }};
}

}  // namespace

const std::vector<Setting>& settings() {
    // clang-format off
    static const std::vector<Setting> table{
        {.key = "every", .names = "--every", .help = "seconds per profile (default 60)",
         .set = set_number<&AgentConfig::every>, .reload = fixed<&AgentConfig::every>(Restart::every)},
        {.key = "frequency", .names = "-F,--frequency",
         .help = "samples per second of each VM thread while it runs (default 99)",
         .set = set_number<&AgentConfig::frequency>, .reload = fixed<&AgentConfig::frequency>(Restart::frequency)},
        {.key = "events", .names = "-e,--events",
         .help = "cpu (default), and any of alloc, wall and offcpu, comma-separated: cpu,alloc adds an allocation "
                 "profile per VM, the stacks that allocate words on process heaps (as beam-bpf-sample -e alloc; each "
                 "such VM takes a debug register of every CPU, 4 at most); cpu,wall a wall-clock profile of every "
                 "Erlang process, where processes wait (as beam-bpf-sample -e wall, 20 ticks a second, 64 processes "
                 "a tick), in process-seconds; cpu,offcpu where the VM's threads block, on locks, in system calls or "
                 "idle (as beam-bpf-sample -e offcpu, its default 1 ms threshold), in thread-nanoseconds",
         .set =
             [](AgentConfig& c, Text, Text v) {
                 std::set<std::string> events;
                 bool known = true;  // each a known event, once
                 for (size_t at = 0;;) {
                     const size_t comma = v.find(',', at);
                     const std::string e = v.substr(at, comma == std::string::npos ? comma : comma - at);
                     known = known && agent_kind(e) && events.insert(e).second;
                     if (comma == std::string::npos) break;
                     at = comma + 1;
                 }
                 if (!known || !events.count("cpu"))
                     throw UserError(fmt::format(
                         "events={}: cpu, and any of {}, each once: cpu,{} (CPU profiles are always made)", v,
                         extra_events(", ", " and "), extra_events(",", ",")));
                 c.events.clear();  // in the list's order, whatever the setting's
                 for (const std::string& kind : extra_kinds())
                     if (events.count(kind)) c.events.push_back(kind);
             },
         .reload = fixed<&AgentConfig::events>(Restart::events)},
        {.key = "watchpoints-in-vm", .names = "--watchpoints-in-vm",
         .help = "true: -e cpu,alloc in a virtual machine, where it is refused by default because a hypervisor can "
                 "hand a watchpoint's trap to the kernel without its cause, and the kernel then kills the VM with a "
                 "SIGTRAP (docs/allocation-profiling.md#virtual-machines); default false",
         .set = [](AgentConfig& c, Text key, Text v) { c.watchpoints_in_vm = boolean(key, v); },
         .reload = fixed<&AgentConfig::watchpoints_in_vm>(Restart::events)},
        {.key = "alloc-period", .names = "--alloc-period",
         .help = "with -e cpu,alloc: a sample every this many words allocated, on average (default 65536)",
         .set = set_number<&AgentConfig::alloc_period>, .reload = fixed<&AgentConfig::alloc_period>(Restart::events)},
        {.key = "native-depth", .names = "--native-depth",
         .help = "native frames below the Erlang ones (default 64; 0: the native leaf only)",
         .set = set_number<&AgentConfig::native_depth>,
         .reload = fixed<&AgentConfig::native_depth>(Restart::native_depth)},
        {.key = "unwind-rows", .names = "--unwind-rows",
         .help = "native unwind rows held in the kernel for all VMs, each file's once (default 2097152: 20 MiB)",
         .set = set_number<&AgentConfig::unwind_rows>, .reload = fixed<&AgentConfig::unwind_rows>(Restart::unwind_rows)},
        {.key = "output", .names = "-o,--output",
         .help = fmt::format("directory of pprof files, one subdirectory per VM (default {}; none: no files)",
                             kDefaultOutput),
         .set = set_text<&AgentConfig::output>, .reload = fixed<&AgentConfig::output>(Restart::output)},
        {.key = "output-group", .names = "--output-group",
         .help = "a group that may read the profiles and stats (files 0640 in 0750 directories; default: none, 0600 "
                 "in 0700)",
         .set = set_text<&AgentConfig::output_group>, .reload = fixed<&AgentConfig::output_group>(Restart::output)},
        {.key = "retention", .names = "--retention",
         .help = "files kept per VM subdirectory and kind (default 60; 0: no count bound; up to 100000)",
         .set = set_number<&AgentConfig::retention>},
        {.key = "retention-bytes", .names = "--retention-bytes",
         .help = "bytes of profiles kept, all VMs together, the oldest removed first (default 1073741824; 1 MiB to 1 "
                 "TiB)",
         .set = set_number<&AgentConfig::retention_bytes>},
        {.key = "retention-age", .names = "--retention-age",
         .help = "seconds a profile is kept (default 604800: 7 days; 10 to 31622400); the directory of an exited VM "
                 "goes with its last file",
         .set = set_number<&AgentConfig::retention_age_s>},
        {.key = "push", .names = "--push",
         .help = "Pyroscope's URL (http://pyroscope:4040): POST /ingest, pprof; no credentials in it (--push-auth)",
         .set = [](AgentConfig& c, Text, Text v) { c.push.url = v; }},
        {.key = "push-auth", .names = "--push-auth",
         .help = "for --push: a file holding user:password (basic) or 'Bearer TOKEN' (mode 0600)",
         .set = [](AgentConfig& c, Text, Text v) { c.push.auth_file = v; }},
        {.key = "push-tenant", .names = "--push-tenant", .help = "for --push: X-Scope-OrgID for a multi-tenant Pyroscope",
         .set = [](AgentConfig& c, Text, Text v) { c.push.headers.push_back("X-Scope-OrgID: " + v); }},
        {.key = "push-headers-file", .names = "--push-headers-file",
         .help = "for --push: a file of 'Name: value' headers, one a line (mode 0600)",
         .set = [](AgentConfig& c, Text, Text v) { c.push.headers_file = v; }},
        {.key = "otlp", .names = "--otlp",
         .help = "an OTLP/HTTP receiver of profiles (http://collector:4318; no path: /v1development/profiles): POST, "
                 "ExportProfilesServiceRequest as application/x-protobuf, gzip-encoded",
         .set = [](AgentConfig& c, Text, Text v) { c.otlp.url = v; }},
        {.key = "otlp-auth", .names = "--otlp-auth",
         .help = "for --otlp: a file holding user:password (basic) or 'Bearer TOKEN' (mode 0600)",
         .set = [](AgentConfig& c, Text, Text v) { c.otlp.auth_file = v; }},
        {.key = "otlp-headers-file", .names = "--otlp-headers-file",
         .help = "for --otlp: a file of 'Name: value' headers (X-Api-Key: ...), one a line, read at each request "
                 "(mode 0600)",
         .set = [](AgentConfig& c, Text, Text v) { c.otlp.headers_file = v; }},
        // Kept to refuse it with the way to do it: a header on the command line is every user's (ps).
        {.key = "otlp-header", .names = "--otlp-header", .help = "refused: headers come from --otlp-headers-file",
         .set =
             [](AgentConfig&, Text, Text) {
                 // A header often carries a key; a command line is every user's to read (ps), and a
                 // configuration file is often world-readable.
                 throw UserError("otlp-header: headers may hold secrets: put them in a file named by "
                                 "otlp-headers-file (one 'Name: value' line each, mode 0600)");
             },
         .one_value = true},
        // TLS for both stores: the CAs that sign them, and the agent's certificate where they ask.
        {.key = "ca-file", .names = "--ca-file",
         .help = "PEM certificates of the CAs that sign the stores' https certificates (default: the system's)",
         .set = [](AgentConfig& c, Text, Text v) { c.push.ca_file = c.otlp.ca_file = v; }},
        {.key = "client-cert", .names = "--client-cert",
         .help = "PEM certificate the agent shows a store that asks for one (mutual TLS)",
         .set = [](AgentConfig& c, Text, Text v) { c.push.client_cert = c.otlp.client_cert = v; }},
        {.key = "client-key", .names = "--client-key",
         .help = "the PEM private key of --client-cert, if not in its file (mode 0600)",
         .set = [](AgentConfig& c, Text, Text v) { c.push.client_key = c.otlp.client_key = v; }},
        // Each store has its own queue, of this bound and backoff.
        {.key = "queue-bytes", .names = "--queue-bytes",
         .help = "profiles waiting to be pushed, per store, at most this many bytes (default 64 MiB; 1 to 4 GiB: 1 "
                 "keeps only the newest)",
         .set =
             [](AgentConfig& c, Text key, Text v) { c.push.queue_bytes = c.otlp.queue_bytes = number<size_t>(key, v); }},
        {.key = "max-backoff", .names = "--max-backoff",
         .help = "seconds between retries of a failed push, at most (default 30; 1 to 3600)",
         .set =
             [](AgentConfig& c, Text key, Text v) {
                 c.push.max_backoff = c.otlp.max_backoff = std::chrono::milliseconds(
                     static_cast<int64_t>(std::min(number<double>(key, v), 1e9) * 1000));
             }},
        {.key = "push-tries", .names = "--push-tries",
         .help = "a profile a store fails this many times is given up, and said (default 10; 1 to 1000)",
         .set = [](AgentConfig& c, Text key, Text v) { c.push.max_tries = c.otlp.max_tries = number<unsigned>(key, v); }},
        {.key = "push-max-age", .names = "--push-max-age",
         .help = "a profile not delivered after this many seconds is given up, and said (default 3600)",
         .set =
             [](AgentConfig& c, Text key, Text v) {
                 c.push.max_age = c.otlp.max_age = std::chrono::seconds(number<uint32_t>(key, v));
             }},
        {.key = "match", .names = "--match",
         .help = "follow only VMs in whose command line (its first 4 KiB), node name or cgroup path this RE2 pattern "
                 "is found (repeatable)",
         .set = [](AgentConfig& c, Text, Text v) { c.match.push_back(v); }, .one_value = true},
        {.key = "stats", .names = "--stats", .help = "counters as JSON, rewritten every second",
         .set = set_text<&AgentConfig::stats_file>},
        {.key = "metrics", .names = "--metrics",
         .help = "the counters in Prometheus' text format on http://127.0.0.1:PORT/metrics (0: a free port, said on "
                 "stderr)",
         .set = set_number<&AgentConfig::metrics_port>, .reload = fixed<&AgentConfig::metrics_port>(Restart::metrics)},
        {.key = "host", .names = "--host", .help = "the host label (default: the host name)",
         .set = set_text<&AgentConfig::host>},
        {.key = "service", .names = "--service",
         .help = "the service name of every VM (default: its release name, else its node name)",
         .set = set_text<&AgentConfig::service>},
        {.key = "target-names", .names = "--target-names",
         .help = "true (default): a VM's release or node name may be its service name; false: only --service and "
                 "service.NODE",
         .set = [](AgentConfig& c, Text key, Text v) { c.target_names = boolean(key, v); }},
        {.key = "process-labels", .names = "--process-labels",
         .help = "none (default): no sample label per Erlang process; registered: a 'process' label with the "
                 "registered name, --process-label-cap values at most per profile, the rest 'other'",
         .set =
             [](AgentConfig& c, Text, Text v) {
                 if (v != "none" && v != "registered")
                     throw UserError(fmt::format("process-labels={}: none or registered", v));
                 c.process_labels = v;
             }},
        {.key = "process-label-cap", .names = "--process-label-cap",
         .help = "distinct 'process' label values per profile (default 50; 1 to 1000)",
         .set = set_number<&AgentConfig::process_label_cap>},
    };
    // clang-format on
    return table;
}

const Setting* find_setting(const std::string& key) {
    for (const Setting& s : settings())
        if (key == s.key) return &s;
    return nullptr;
}

void add_setting_options(CLI::App& app, GivenOptions& given) {
    for (const Setting& s : settings()) {
        CLI::Option* o = app.add_option_function<std::vector<std::string>>(
            s.names,
            [&given, key = s.key](const std::vector<std::string>& vs) {
                for (const std::string& v : vs) given.emplace_back(key, v);
            },
            s.help);
        if (s.one_value) o->allow_extra_args(false);
    }
}

void set_option(AgentConfig& c, const std::string& key, const std::string& v) {
    if (const Setting* s = find_setting(key)) s->set(c, key, v);
    else if (key.starts_with("service.") && key.size() > 8) c.service_by_node[key.substr(8)] = v;
    else if (key.starts_with("label.") && key.size() > 6) c.labels.emplace_back(key.substr(6), v);
    else {
        std::vector<std::string> keys;
        for (const Setting& s : settings()) keys.push_back(s.key);
        const std::string meant = slip_of(key, std::move(keys));
        throw UserError(fmt::format("unknown setting {}{}", key, meant.empty() ? "" : "; did you mean " + meant + "?"));
    }
    c.given.insert(key.starts_with("service.") ? "service." : key.starts_with("label.") ? "label." : key);
}

void load_config_file(const std::string& path, AgentConfig& c) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0)
        throw UserError(fmt::format("cannot read the configuration {}: {}", path, std::strerror(errno)));
    if (!S_ISREG(st.st_mode)) throw UserError(fmt::format("the configuration {} is not a file", path));
    std::ifstream f(path);
    if (!f) throw UserError(fmt::format("cannot read the configuration {}", path));
    std::string line;
    for (int no = 1; std::getline(f, line); no++) {
        if (line.size() > 4096) throw UserError(fmt::format("{}:{}: line too long", path, no));
        if (no > 10000) throw UserError(fmt::format("{}: more than 10000 lines", path));
        std::string t = trim(line);
        if (t.empty() || t[0] == '#') continue;
        size_t eq = t.find('=');
        if (eq == std::string::npos) throw UserError(fmt::format("{}:{}: not key=value", path, no));
        try {
            set_option(c, trim(t.substr(0, eq)), trim(t.substr(eq + 1)));
        } catch (const UserError& e) {
            throw UserError(fmt::format("{}:{}: {}", path, no, e.what()));
        }
    }
}

void check(const AgentConfig& c) {
    in_range("every", c.every, 1.0, 86400.0, "seconds");
    if (c.metrics_port < -1 || c.metrics_port > 65535)
        throw UserError(fmt::format("--metrics {}: a port", c.metrics_port));
    if (c.unwind_rows < (64u << 10) || c.unwind_rows > (64u << 20))
        throw UserError(
            fmt::format("--unwind-rows {}: 65536 to 67108864 (10 bytes of kernel memory each)", c.unwind_rows));
    if (c.frequency == 0 || c.frequency > 100000) throw UserError(fmt::format("-F {}: 1 to 100000 Hz", c.frequency));
    in_range("native-depth", c.native_depth, 0u, static_cast<uint32_t>(BB_MAX_NATIVE_FRAMES), "frames");
    if (c.alloc_period && (c.alloc_period < 64 || c.alloc_period > 0xffffffffull))
        throw UserError(fmt::format("--alloc-period {}: 64 to 4294967295 words", c.alloc_period));
    if (c.given.count("alloc-period") && !c.has_event("alloc"))
        throw UserError("--alloc-period: only with -e cpu,alloc");
    if (c.watchpoints_in_vm && !c.has_event("alloc")) throw UserError("--watchpoints-in-vm: only with -e cpu,alloc");
    if (c.output == "none" && c.push.url.empty() && c.otlp.url.empty())
        throw UserError("--output none without --push or --otlp: the profiles would go nowhere");
    for (const char* k : {"output-group", "retention", "retention-bytes", "retention-age"})
        if (c.output == "none" && c.given.count(k)) throw UserError(fmt::format("--{}: not with --output none", k));
    in_range("retention", c.retention, size_t{0}, size_t{100000}, "files per VM and kind (0: no count bound)");
    in_range("retention-bytes", c.retention_bytes, uint64_t{1} << 20, uint64_t{1} << 40, "bytes");
    in_range("retention-age", c.retention_age_s, uint64_t{10}, uint64_t{366} * 24 * 3600, "seconds");
    if (!c.output_group.empty() && !getgrnam(c.output_group.c_str()))
        throw UserError(fmt::format("--output-group {}: no such group", c.output_group));
    in_range("queue-bytes", c.push.queue_bytes, size_t{1}, size_t{4} << 30, "bytes (1: only the newest profile waits)");
    in_range("max-backoff", c.push.max_backoff.count() / 1000.0, 1.0, 3600.0, "seconds");
    in_range("push-tries", c.push.max_tries, 1u, 1000u, "tries");
    in_range("push-max-age", static_cast<int64_t>(c.push.max_age.count()), int64_t{10}, int64_t{86400}, "seconds");
    in_range("process-label-cap", c.process_label_cap, size_t{1}, size_t{1000}, "values");
    for (const auto& [key, needs] : kNeeds)
        if (c.given.count(key) && !c.given.count(needs)) throw UserError(fmt::format("--{} needs --{}", key, needs));
    for (const char* k : {"ca-file", "client-cert", "client-key"})
        if (c.given.count(k) && c.push.url.empty() && c.otlp.url.empty())
            throw UserError(fmt::format("--{} needs --push or --otlp", k));
    if (c.given.count("client-key") && !c.given.count("client-cert"))
        throw UserError("--client-key needs --client-cert");
    if (c.stats_file.size()) {
        std::filesystem::path dir = std::filesystem::path(c.stats_file).parent_path();
        if (dir.empty()) dir = std::filesystem::current_path();
        if (access(dir.c_str(), W_OK) != 0)
            throw UserError(
                fmt::format("--stats {}: cannot write in {}: {}", c.stats_file, dir.string(), std::strerror(errno)));
    }
    for (const std::string& m : c.match)
        if (std::string e = Matcher::error(m); !e.empty())
            throw UserError(fmt::format("--match {}: not an RE2 regular expression: {}", m, e));
    for (const auto& [option, push] : {std::pair{"--push", &c.push}, std::pair{"--otlp", &c.otlp}}) {
        if (push->url.empty()) continue;
        if (!push->url.starts_with("http://") && !push->url.starts_with("https://"))
            throw UserError(fmt::format("{}: an http:// or https:// URL", option));
        // user:password@host would be on the command line, in logs and in --check: refused,
        // without repeating it.
        std::string authority = push->url.substr(push->url.find("://") + 3);
        authority = authority.substr(0, authority.find_first_of("/?#"));
        if (authority.find('@') != std::string::npos)
            throw UserError(
                fmt::format("{}: the URL holds credentials (user@ or user:password@): put them in a file named "
                            "by {}-auth",
                            option, option));
        if (has_control_byte(push->url) || push->url.size() > 2048)
            throw UserError(fmt::format("{}: not a URL", option));
        // A header is one line: no byte that could end it and start another.
        for (const std::string& h : push->headers)
            if (h.find(':') == std::string::npos || h.find(':') == 0 || has_control_byte(h))
                throw UserError(fmt::format("{} header '{}': one line 'Name: value'", option, h));
    }
    for (const auto& [k, v] : c.labels)
        if (k.empty() || k.size() > 64 || !std::all_of(k.begin(), k.end(), [](char ch) {
                return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_';
            }))
            throw UserError(fmt::format("label.{}: a key of letters, digits and _ (at most 64)", k));
    for (const std::string* s : {&c.host, &c.service})
        if (has_control_byte(*s) || s->size() > 256)
            throw UserError("--host and --service: one line of at most 256 bytes");
}

AgentConfig load_config(const std::string& file, const GivenOptions& given) {
    AgentConfig c;
    if (!file.empty()) load_config_file(file, c);
    // A --match on the command line replaces the file's.
    bool cli_match = std::any_of(given.begin(), given.end(), [](const auto& kv) { return kv.first == "match"; });
    if (cli_match) c.match.clear();
    for (const auto& [k, v] : given) {
        try {
            set_option(c, k, v);
        } catch (const UserError& e) {
            throw UserError(fmt::format("--{}", e.what()));
        }
    }
    check(c);
    return c;
}

std::vector<std::string> keep_running(const AgentConfig& running, AgentConfig& next) {
    std::vector<std::string> differ;
    for (int g = static_cast<int>(Restart::no) + 1; g < static_cast<int>(Restart::end); g++) {
        std::string names;
        bool changed = false;
        for (const Setting& s : settings()) {
            if (static_cast<int>(s.reload.group) != g) continue;
            names += (names.empty() ? "" : ", ") + std::string(s.key);
            changed = changed || s.reload.differs(running, next);
        }
        if (changed) differ.push_back(names);
    }
    for (const Setting& s : settings())
        if (s.reload.group != Restart::no) s.reload.keep(running, next);
    return differ;
}

std::string describe(const AgentConfig& c) {
    std::string out;
    auto line = [&](const std::string& k, const auto& v) { out += fmt::format("{}={}\n", k, v); };
    auto or_none = [](const std::string& s) { return s.empty() ? std::string("(none)") : s; };
    line("every", c.every);
    line("frequency", c.frequency);
    line("events", fmt::format("cpu{}{}", c.events.empty() ? "" : ",", fmt::join(c.events, ",")));
    if (c.has_event("alloc")) line("watchpoints-in-vm", c.watchpoints_in_vm ? "true" : "false");
    if (c.has_event("alloc"))
        line("alloc-period", c.alloc_period ? std::to_string(c.alloc_period) : "65536 (-e alloc's default)");
    line("native-depth", c.native_depth);
    line("unwind-rows", c.unwind_rows);
    line("output", c.output);
    if (c.output != "none") {
        line("output-group", c.output_group.empty() ? "(none: files 0600 in 0700 directories)" : c.output_group);
        line("retention", c.retention);
        line("retention-bytes", c.retention_bytes);
        line("retention-age", c.retention_age_s);
    }
    for (const auto& [key, p] : {std::pair{"push", &c.push}, std::pair{"otlp", &c.otlp}}) {
        line(key, or_none(p->url));
        if (p->url.empty()) continue;
        line(fmt::format("{}-auth", key), or_none(p->auth_file));
        line(fmt::format("{}-headers-file", key), or_none(p->headers_file));
        for (const std::string& h : p->headers)
            line(fmt::format("{}-header", key), h.substr(0, h.find(':')) + ": (set)");
    }
    if (!c.push.url.empty() || !c.otlp.url.empty()) {
        line("ca-file", c.push.ca_file.empty() ? "(the system's CAs)" : c.push.ca_file);
        line("client-cert", or_none(c.push.client_cert));
        line("client-key", or_none(c.push.client_key));
        line("queue-bytes", c.push.queue_bytes);
        line("max-backoff", c.push.max_backoff.count() / 1000.0);
        line("push-tries", c.push.max_tries);
        line("push-max-age", c.push.max_age.count());
    }
    for (const std::string& m : c.match) line("match", m);
    if (c.match.empty()) line("match", "(none: every VM)");
    line("stats", or_none(c.stats_file));
    line("metrics", c.metrics_port < 0 ? "(none)" : std::to_string(c.metrics_port));
    line("host", c.host.empty() ? "(the host name)" : c.host);
    line("service", c.service.empty() ? "(per VM)" : c.service);
    for (const auto& [node, s] : c.service_by_node) line("service." + node, s);
    line("target-names", c.target_names ? "true" : "false");
    line("process-labels", c.process_labels);
    if (c.process_labels != "none") line("process-label-cap", c.process_label_cap);
    for (const auto& [k, v] : c.labels) line("label." + k, v);
    return out;
}

std::vector<std::string> secret_file_warnings(const AgentConfig& c) {
    std::vector<std::string> out;
    auto look = [&](const char* option, const std::string& path) {
        if (path.empty()) return;
        struct stat st;
        if (stat(path.c_str(), &st) != 0) out.push_back(fmt::format("--{} {}: {}", option, path, std::strerror(errno)));
        else if (!S_ISREG(st.st_mode)) out.push_back(fmt::format("--{} {}: not a file", option, path));
        else if (st.st_mode & (S_IRGRP | S_IROTH))
            out.push_back(fmt::format("--{} {}: readable by {} (mode {:04o}): it holds secrets; chmod 600 it", option,
                                      path, st.st_mode & S_IROTH ? "every user" : "its group", st.st_mode & 07777));
    };
    look("push-auth", c.push.auth_file);
    look("push-headers-file", c.push.headers_file);
    look("otlp-auth", c.otlp.auth_file);
    look("otlp-headers-file", c.otlp.headers_file);
    look("client-key", c.push.client_key);
    return out;
}

}  // namespace bb::agent
