// What the tests of beam-bpf-agent share: a directory of their own (TempDir), files read whole,
// and the stand-in stores of tests/agent started on a free port.
#pragma once
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "harness.hpp"
#include "temp_dir.hpp"

namespace bbt {

namespace fs = std::filesystem;

inline std::string slurp(const fs::path& p) { return read_file(p.string()); }

// One of tests/agent's receivers on 127.0.0.1 ("--port 0": a free port), once it listens:
// it writes its port to `port_file`.
inline std::unique_ptr<ChildProcess> start_receiver(const std::string& script, std::vector<std::string> args,
                                                    const fs::path& port_file) {
    fs::remove(port_file);
    args.insert(args.begin(), {"python3", std::string(BB_SOURCE_DIR) + "/tests/agent/" + script});
    args.insert(args.end(), {"--port-file", port_file.string()});
    auto c = std::make_unique<ChildProcess>(args);
    for (int i = 0; i < 200 && !fs::exists(port_file); i++) std::this_thread::sleep_for(50ms);
    if (!fs::exists(port_file)) throw std::runtime_error(script + " did not start");
    return c;
}

// The agent's /metrics: the URL its "metrics on URL" line gave, read with Python's urllib (a
// client of its own, not the agent's code).
inline ToolResult get_metrics(const std::string& url) {
    return run_command(
        {"python3", "-c",
         "import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1]).read().decode())", url},
        20s);
}

// An agent that ends an interval every `every` seconds, follows the VMs `match` finds and writes
// --stats to `stats`, with --metrics on a free port; once it has attached to `vm_pid`, its metrics
// URL in `url` (empty if either is not seen within 30 s: the test's to fail).
inline RunningTool start_metrics_agent(const std::string& every, const std::string& match, const fs::path& stats,
                                       pid_t vm_pid, std::string& url) {
    RunningTool agent = start_tool("beam-bpf-agent",
                                   {"--every", every, "--match", match, "--stats", stats.string(), "--metrics", "0"});
    std::string err;
    std::smatch m;
    url.clear();
    if (wait_stderr(agent, "(pid " + std::to_string(vm_pid) + ",", 30s, &err) &&
        std::regex_search(agent.err, m, std::regex(R"(metrics on (http://127\.0\.0\.1:\d+/metrics))")))
        url = m[1].str();
    return agent;
}

}  // namespace bbt
