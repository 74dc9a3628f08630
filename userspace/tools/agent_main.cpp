// beam-bpf-agent: one long-running process per host that profiles every BEAM VM on it, into a
// directory of pprof files, Grafana Pyroscope and/or an OTLP/HTTP receiver of profiles.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <signal.h>

#include <algorithm>
#include <atomic>

#include "agent/agent.hpp"
#include "base/error.hpp"
#include "run/options.hpp"

using namespace bb;

namespace {

std::atomic<bool> g_stop{false}, g_reload{false};
void on_stop(int) { g_stop = true; }
void on_hup(int) { g_reload = true; }

int run(int argc, char** argv) {
    CLI::App app{
        "beam-bpf-agent: profiles every BEAM VM on this host (containers too), one pprof profile per VM\n"
        "per interval, to a directory, Grafana Pyroscope and/or OTLP. Runs until SIGTERM (which writes the last\n"
        "interval); SIGHUP re-reads --config. Needs root, or CAP_BPF + CAP_PERFMON + CAP_SYS_PTRACE."};
    agent::AgentConfig defaults;
    // Options given on the command line, as key=value: applied over the file's at each (re)load.
    std::vector<std::pair<std::string, std::string>> given;
    auto opt = [&](const char* names, const char* key, const std::string& help) {
        return app.add_option_function<std::vector<std::string>>(
            names, [&given, key](const std::vector<std::string>& vs) {
                for (const std::string& v : vs) given.emplace_back(key, v);
            },
            help);
    };
    std::string config_file;
    bool check_only = false;
    app.add_flag("--check", check_only, "check the options and the configuration file, say what they mean, and exit");
    app.add_option("--config", config_file,
                   "key=value settings, one per line, keys as the long options (and service.NODE=NAME, "
                   "label.KEY=VALUE); the command line wins; SIGHUP re-reads it");
    opt("--every", "every", "seconds per profile (default 60)");
    opt("-F,--frequency", "frequency", "samples per second of each VM thread while it runs (default 99)");
    opt("-e,--events", "events",
        "cpu (default), or cpu,alloc: an allocation profile per VM too, the stacks that allocate words on process "
        "heaps (as beam-bpf-sample -e alloc; each such VM takes a debug register of every CPU, 4 at most)");
    opt("--alloc-period", "alloc-period", "with -e cpu,alloc: a sample every this many words allocated, on average (default 65536)");
    opt("--native-depth", "native-depth", "native frames below the Erlang ones (default 64; 0: the native leaf only)");
    opt("--unwind-rows", "unwind-rows",
        "native unwind rows held in the kernel for all VMs, each file's once (default 2097152: 20 MiB)");
    opt("-o,--output", "output",
        fmt::format("directory of pprof files, one subdirectory per VM (default {}; none: no files)", agent::kDefaultOutput));
    opt("--output-group", "output-group",
        "a group that may read the profiles and stats (files 0640 in 0750 directories; default: none, 0600 in 0700)");
    opt("--retention", "retention", "files kept per VM subdirectory and kind (default 60; 0: no count bound; up to 100000)");
    opt("--retention-bytes", "retention-bytes",
        "bytes of profiles kept, all VMs together, the oldest removed first (default 1073741824; 1 MiB to 1 TiB)");
    opt("--retention-age", "retention-age",
        "seconds a profile is kept (default 604800: 7 days; 10 to 31622400); the directory of an exited VM goes "
        "with its last file");
    opt("--push", "push",
        "Pyroscope's URL (http://pyroscope:4040): POST /ingest, pprof; no credentials in it (--push-auth)");
    opt("--push-auth", "push-auth", "for --push: a file holding user:password (basic) or 'Bearer TOKEN' (mode 0600)");
    opt("--push-tenant", "push-tenant", "for --push: X-Scope-OrgID for a multi-tenant Pyroscope");
    opt("--push-headers-file", "push-headers-file", "for --push: a file of 'Name: value' headers, one a line (mode 0600)");
    opt("--otlp", "otlp",
        "an OTLP/HTTP receiver of profiles (http://collector:4318; no path: /v1development/profiles): "
        "POST, ExportProfilesServiceRequest as application/x-protobuf, gzip-encoded");
    opt("--otlp-auth", "otlp-auth", "for --otlp: a file holding user:password (basic) or 'Bearer TOKEN' (mode 0600)");
    opt("--otlp-headers-file", "otlp-headers-file",
        "for --otlp: a file of 'Name: value' headers (X-Api-Key: ...), one a line, read at each request (mode 0600)");
    // Kept to refuse it with the way to do it: a header on the command line is every user's (ps).
    opt("--otlp-header", "otlp-header", "refused: headers come from --otlp-headers-file")->allow_extra_args(false);
    opt("--ca-file", "ca-file", "PEM certificates of the CAs that sign the stores' https certificates (default: the system's)");
    opt("--client-cert", "client-cert", "PEM certificate the agent shows a store that asks for one (mutual TLS)");
    opt("--client-key", "client-key", "the PEM private key of --client-cert, if not in its file (mode 0600)");
    opt("--queue-bytes", "queue-bytes", "profiles waiting to be pushed, per store, at most this many bytes (default 64 MiB; 1 to 4 GiB: 1 keeps only the newest)");
    opt("--max-backoff", "max-backoff", "seconds between retries of a failed push, at most (default 30; 1 to 3600)");
    opt("--push-tries", "push-tries", "a profile a store fails this many times is given up, and said (default 10; 1 to 1000)");
    opt("--push-max-age", "push-max-age", "a profile not delivered after this many seconds is given up, and said (default 3600)");
    opt("--match", "match",
        "follow only VMs in whose command line (its first 4 KiB), node name or cgroup path this RE2 pattern is "
        "found (repeatable)")
        ->allow_extra_args(false);
    opt("--stats", "stats", "counters as JSON, rewritten every second");
    opt("--metrics", "metrics", "the counters in Prometheus' text format on http://127.0.0.1:PORT/metrics (0: a free port, said on stderr)");
    opt("--host", "host", "the host label (default: the host name)");
    opt("--service", "service", "the service name of every VM (default: its release name, else its node name)");
    opt("--target-names", "target-names",
        "true (default): a VM's release or node name may be its service name; false: only --service and service.NODE");
    opt("--process-labels", "process-labels",
        "none (default): no sample label per Erlang process; registered: a 'process' label with the registered "
        "name, --process-label-cap values at most per profile, the rest 'other'");
    opt("--process-label-cap", "process-label-cap", "distinct 'process' label values per profile (default 50; 1 to 1000)");
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        // One line, as every other refusal: an init system's log shows it whole.
        fmt::print(stderr, "beam-bpf-agent: error: {} (see --help)\n", e.what());
        return e.get_exit_code();
    }
    auto load = [&] {
        agent::AgentConfig c;
        if (!config_file.empty()) agent::load_config_file(config_file, c);
        // A --match on the command line replaces the file's.
        bool cli_match = std::any_of(given.begin(), given.end(), [](const auto& kv) { return kv.first == "match"; });
        if (cli_match) c.match.clear();
        for (const auto& [k, v] : given) {
            try {
                agent::set_option(c, k, v);
            } catch (const UserError& e) {
                throw UserError(fmt::format("--{}", e.what()));
            }
        }
        agent::check(c);
        return c;
    };
    agent::AgentConfig cfg = load();
    const std::string summary = fmt::format(
        "every {} s, {} Hz{}, {}{}{}{}", cfg.every, cfg.frequency, cfg.alloc ? " and allocation" : "", cfg.output == "none" ? "no files" : "files in " + cfg.output,
        cfg.push.url.empty() ? "" : ", pushing to " + cfg.push.url, cfg.otlp.url.empty() ? "" : ", OTLP to " + cfg.otlp.url,
        cfg.match.empty() ? ", every VM" : fmt::format(", VMs matching {}", fmt::join(cfg.match, " or ")));
    const std::vector<std::string> warnings = agent::secret_file_warnings(cfg);
    if (check_only) {
        fmt::print("beam-bpf-agent: configuration ok: {}\n{}", summary, agent::describe(cfg));
        for (const std::string& w : warnings) fmt::print(stderr, "beam-bpf-agent: warning: {}\n", w);
        return 0;
    }
    check_privileges();
    for (const std::string& w : warnings) fmt::print(stderr, "beam-bpf-agent: warning: {}\n", w);

    struct sigaction sa{};
    sa.sa_handler = on_stop;  // no SA_RESTART: the loop's sleep ends at once
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sa.sa_handler = on_hup;
    sigaction(SIGHUP, &sa, nullptr);
    signal(SIGPIPE, SIG_IGN);

    agent::Agent a(cfg);
    fmt::print(stderr, "beam-bpf-agent: started: {}\n", summary);
    a.run(g_stop, g_reload, load);
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return guarded_main("beam-bpf-agent", [&] { return run(argc, argv); });
}
