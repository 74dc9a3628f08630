// beam-bpf-agent against what a local user can run and what a busy VM looks like (issue 32):
//  - a fake beam.smp of user nobody with a 64 KiB command line, under each example --match of
//    packaging/agent.conf: std::regex recursed once per character of it (SIGSEGV); the agent
//    must live on and keep profiling a real VM;
//  - a VM of 10,000 busy processes pushed to the Pyroscope receiver: Pyroscope makes a series of
//    each distinct set of sample labels (and the name's labels), counted here as its
//    distributor does; a handful per profile at most, and no pid in them.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "agent_fixtures.hpp"
#include "harness.hpp"

namespace bbt {
namespace agent_labels_test {

// The label sets of a profile's samples, as `go tool pprof -traces` prints them (each sample's
// "key:value" lines before its frames), and its sample count.
struct Decoded {
    std::set<std::map<std::string, std::string>> label_sets;
    long samples = 0;
};

Decoded decode(const fs::path& file) {
    ToolResult r = run_command({"go", "tool", "pprof", "-traces", "-sample_index=samples", file.string()}, 60s);
    if (r.exit_code != 0) throw std::runtime_error("go tool pprof -traces " + file.string() + ": " + describe(r));
    Decoded out;
    static const std::regex label(R"(^\s*([A-Za-z_]+):\s+\[?(.*?)\]?$)"), first(R"(^\s*(\d+)\s+(\S.*)$)");
    std::optional<std::map<std::string, std::string>> labels;
    bool in_frames = false;
    for (const std::string& line : lines_of(r.out)) {
        if (line.starts_with("-----------")) {
            if (labels && in_frames) out.label_sets.insert(*labels);
            labels.emplace();
            in_frames = false;
            continue;
        }
        if (!labels || in_frames) continue;  // the header, or a frame after the first
        std::smatch m;
        if (std::regex_match(line, m, first)) {
            out.samples += std::stol(m[1]);
            in_frames = true;
        } else if (std::regex_match(line, m, label)) {
            (*labels)[m[1]] = m[2];
        }
    }
    if (labels && in_frames) out.label_sets.insert(*labels);
    return out;
}

// A profile file of the VM under `out` (its directory ends in -PID), waited for.
bool wait_profile(const fs::path& out, pid_t pid, std::chrono::milliseconds timeout) {
    for (auto end = std::chrono::steady_clock::now() + timeout; std::chrono::steady_clock::now() < end;) {
        std::error_code ec;
        for (const auto& d : fs::directory_iterator(out, ec))
            if (d.path().filename().string().ends_with("-" + std::to_string(pid)))
                for (const auto& f : fs::directory_iterator(d.path(), ec))
                    if (f.path().string().ends_with(".pb.gz")) return true;
        std::this_thread::sleep_for(100ms);
    }
    return false;
}

class AgentLabelsTest : public RootTest {};

TEST_F(AgentLabelsTest, FakeBeamOfNobodyWithA64KiBCommandLineUnderEachExampleMatch) {
    TempDir tmp;
    chmod(tmp.path.c_str(), 0755);  // the fake beam.smp runs as nobody from here
    const fs::path fake = tmp.path / "beam.smp";
    fs::copy_file("/bin/bash", fake);
    chmod(fake.c_str(), 0755);
    // Every example pattern is found in its first bytes, then 64 KiB that `.*` runs over; bash
    // -c runs a loop (a single command would be exec'd: the process would be sleep's).
    const std::string huge = "rabbit@/kubepods bbx@" + std::string(64 * 1024, 'a');
    ChildProcess nobody({"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", fake.string(), "-c",
                         "while :; do sleep 1; done", "beam.smp", huge});
    // The real VM each agent run must still profile: its command line holds every pattern too.
    ErlVm vm(debian_vm(), "bb_work:main(split532)", {"-sname", "bbx", "-bb_tag", "rabbit@/kubepods/bbx@"});
    vm.wait_line("ready", 60s);
    for (int i = 0;
         i < 50 && fs::read_symlink("/proc/" + std::to_string(nobody.pid()) + "/exe").string() != fake.string(); i++)
        std::this_thread::sleep_for(20ms);
    ASSERT_EQ(fs::read_symlink("/proc/" + std::to_string(nobody.pid()) + "/exe"), fake);
    ASSERT_GE(slurp("/proc/" + std::to_string(nobody.pid()) + "/cmdline").size(), 64u * 1024);
    struct stat st {};
    ASSERT_EQ(stat(("/proc/" + std::to_string(nobody.pid())).c_str(), &st), 0);
    ASSERT_NE(st.st_uid, 0u) << "the fake beam.smp runs as root";

    for (const std::string pattern : {"rabbit@", "/kubepods", "bbx@.*"}) {
        SCOPED_TRACE("--match " + pattern);
        const fs::path out = tmp.path / ("out" + std::to_string(std::hash<std::string>{}(pattern)));
        RunningTool agent = start_tool("beam-bpf-agent",
                                       {"--every", "1", "--output", out.string(), "--match", pattern});
        std::string err;
        // Both were in the agent's first scan (started before it): the fake went through --match.
        ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(vm.os_pid()) + ",", 30s, &err)) << err;
        ASSERT_TRUE(wait_profile(out, vm.os_pid(), 10s)) << agent.err;
        ASSERT_EQ(kill(agent.pid, 0), 0) << "the agent died: " << agent.err;
        kill(agent.pid, SIGTERM);
        ToolResult r = finish_tool(agent, false, 30s);
        ASSERT_EQ(r.exit_code, 0) << describe(r);
        EXPECT_NE(r.err.find("detached pid " + std::to_string(vm.os_pid())), std::string::npos) << r.err;
        // What the agent logged of the fake is cleaned and bounded: no 64 KiB line.
        for (const std::string& line : lines_of(r.err)) EXPECT_LT(line.size(), 8192u) << line.substr(0, 200);
    }
}

TEST_F(AgentLabelsTest, TenThousandBusyProcessesMakeOneSeriesPerProfileWithoutPids) {
    TempDir tmp;
    const fs::path out = tmp.path / "profiles", recv = tmp.path / "received", port_file = tmp.path / "port";
    fs::create_directories(recv);
    auto receiver = start_receiver("pyroscope_receiver.py", {"--out", recv.string(), "--port", "0"}, port_file);
    ErlVm vm(debian_vm(), "bb_many:main(10000)", {"-sname", "bbmany"});
    vm.wait_line("ready", 60s);
    RunningTool agent = start_tool("beam-bpf-agent", {"--every", "2", "-F", "499", "--output", out.string(), "--push",
                                                      "http://127.0.0.1:" + slurp(port_file), "--match", "^bbmany@"});
    std::string err;
    ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(vm.os_pid()) + ",", 30s, &err)) << err;
    std::this_thread::sleep_for(4500ms);  // two intervals at least
    kill(agent.pid, SIGTERM);
    ToolResult r = finish_tool(agent, false, 30s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);

    size_t profiles = 0;
    long samples = 0;
    std::set<std::string> series_all;  // over every profile: the same VM, so the same series
    for (const auto& f : fs::directory_iterator(recv)) {
        if (f.path().extension() != ".json") continue;
        nlohmann::json meta = nlohmann::json::parse(slurp(f.path()));
        fs::path body = f.path();
        body.replace_extension(".pb.gz");
        const Decoded d = decode(body);
        profiles++;
        samples += d.samples;
        // Pyroscope's distributor: one series per distinct set of sample labels, each with the
        // name's labels (the name's win where a key is in both).
        std::set<std::string> series;
        for (const auto& sample_labels : d.label_sets) {
            std::map<std::string, std::string> all = sample_labels;
            for (const auto& [k, v] : meta["labels"].items()) all[k] = v.get<std::string>();
            all["service_name"] = meta["app"].get<std::string>();
            nlohmann::json j(all);
            series.insert(j.dump());
            for (const char* pid_key : {"os_pid", "ns_pid", "pid", "process", "scheduler", "container_id", "cgroup"})
                EXPECT_FALSE(all.count(pid_key)) << pid_key << " in the series " << j.dump();
        }
        std::cerr << "agent labels test: " << body.filename() << ": " << d.samples << " samples, "
                  << d.label_sets.size() << " sample label sets, " << series.size() << " series\n";
        EXPECT_LE(series.size(), 3u) << body;
        EXPECT_FALSE(meta["labels"].contains("os_pid")) << meta.dump();
        series_all.insert(series.begin(), series.end());
    }
    EXPECT_GE(profiles, 2u);
    // Enough samples that labels per process would have shown: hundreds of distinct processes.
    EXPECT_GE(samples, 500) << r.err;
    EXPECT_LE(series_all.size(), 3u) << "series that differ between intervals of one VM";
}

}  // namespace agent_labels_test
}  // namespace bbt
