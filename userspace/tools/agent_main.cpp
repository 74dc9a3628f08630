// beam-bpf-agent: one long-running process per host that profiles every BEAM VM on it, into a
// directory of pprof files, Grafana Pyroscope and/or an OTLP/HTTP receiver of profiles.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <signal.h>

#include <atomic>

#include "agent/agent.hpp"
#include "base/error.hpp"
#include "base/usage.hpp"
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
    // Options given on the command line, as key=value: applied over the file's at each (re)load.
    agent::GivenOptions given;
    std::string config_file;
    bool check_only = false;
    app.add_flag("--check", check_only, "check the options and the configuration file, say what they mean, and exit");
    app.add_option("--config", config_file,
                   "key=value settings, one per line, keys as the long options (and service.NODE=NAME, "
                   "label.KEY=VALUE); the command line wins; SIGHUP re-reads it");
    agent::add_setting_options(app, given);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        // One line, as every other refusal: an init system's log shows it whole.
        return usage_error(app, e);
    }
    auto load = [&] { return agent::load_config(config_file, given); };
    agent::AgentConfig cfg = load();
    const std::string summary = fmt::format("every {} s, {} Hz, profiles cpu{}{}, {}{}{}{}", cfg.every, cfg.frequency,
                                            cfg.events.empty() ? "" : ",", fmt::join(cfg.events, ","),
                                            cfg.output == "none" ? "no files" : "files in " + cfg.output,
                                            cfg.push.url.empty() ? "" : ", pushing to " + cfg.push.url,
                                            cfg.otlp.url.empty() ? "" : ", OTLP to " + cfg.otlp.url,
                                            cfg.match.empty()
                                                ? ", every VM"
                                                : fmt::format(", VMs matching {}", fmt::join(cfg.match, " or ")));
    const std::vector<std::string> warnings = agent::secret_file_warnings(cfg);
    if (check_only) {
        fmt::print("beam-bpf-agent: configuration ok: {}\n{}", summary, agent::describe(cfg));
        for (const std::string& w : warnings) fmt::print(stderr, "beam-bpf-agent: warning: {}\n", w);
        return 0;
    }
    check_privileges();
    for (const std::string& w : warnings) fmt::print(stderr, "beam-bpf-agent: warning: {}\n", w);

    struct sigaction sa {};
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
