// beam-bpf-perfmap against the map the same VM writes itself (+JPperf map), on every test VM:
// the same ranges and names, at attach and with --follow after a module is loaded and purged
// (tests/workloads/bb_perfmap.erl).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "harness.hpp"

namespace perfmap_test {

using namespace bbt;

const std::string kTool = "beam-bpf-perfmap";

using Line = std::tuple<uint64_t, uint64_t, std::string>;  // start, size, name

// A perf map's lines ("START SIZE NAME", hex). Empty ranges are left out: a consumer cannot
// place an address in one (the VM writes some, e.g. a module's codeFooter when nothing follows).
std::set<Line> read_map(const std::string& path) {
    std::set<Line> lines;
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
        std::istringstream ls(line);
        std::string start, size, name;
        ls >> start >> size;
        std::getline(ls >> std::ws, name);
        EXPECT_FALSE(name.empty()) << path << ": '" << line << "'";
        uint64_t n = std::stoull(size, nullptr, 16);
        if (n) lines.insert({std::stoull(start, nullptr, 16), n, name});
    }
    return lines;
}

// What one map has that the other has not, for failure messages (the first few).
std::string diff(const std::set<Line>& a, const std::set<Line>& b) {
    std::ostringstream s;
    int shown = 0;
    for (const auto& l : a)
        if (!b.count(l) && shown++ < 10)
            s << "  " << std::hex << std::get<0>(l) << " " << std::get<1>(l) << std::dec << " " << std::get<2>(l)
              << "\n";
    return s.str();
}

size_t count_module(const std::set<Line>& lines, const std::string& module) {
    size_t n = 0;
    for (const auto& l : lines) n += std::get<2>(l).starts_with("$" + module + ":");
    return n;
}

class PerfmapVmTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, PerfmapVmTest, ::testing::ValuesIn(test_vms()), test_vm_name);

TEST_P(PerfmapVmTest, SameAsTheVmsOwnMap) {
    ErlVm erl(vm(), "bb_perfmap:main()", {"+JPperf", "map"});
    erl.wait_line("ready");
    const std::string pid = std::to_string(erl.os_pid());
    const std::string theirs = "/tmp/perf-" + pid + ".map", ours = ::testing::TempDir() + "/perfmap-" + pid + ".map";

    // Once: written whole, readable by any perf user.
    ToolResult once = run_tool(kTool, {"-o", ours, pid}, 60s);
    ASSERT_EQ(once.exit_code, 0) << describe(once);
    auto vm_map = read_map(theirs), our_map = read_map(ours);
    std::cout << "[          ] the VM's map: " << vm_map.size() << " ranges; ours: " << our_map.size() << "\n";
    ASSERT_GT(vm_map.size(), 1000u);
    EXPECT_EQ(our_map, vm_map) << "only the VM's:\n"
                               << diff(vm_map, our_map) << "only ours:\n"
                               << diff(our_map, vm_map);
    struct stat st {};
    ASSERT_EQ(stat(ours.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);

    // --follow: a module loaded after the start is in the map within an interval or so; purged,
    // it goes where the VM says it went (OTP 27 unregisters purged code; OTP 25 and 26 never
    // do, and their own map keeps it too).
    RunningTool t = start_tool(kTool, {"--follow", "--interval", "0.1", "-o", ours, pid});
    std::string err;
    ASSERT_TRUE(wait_stderr(t, "wrote", 30s, &err)) << err;
    auto wait_for = [&](const std::string& module, bool present) {
        for (int k = 0; k < 100; k++) {
            if ((count_module(read_map(ours), module) > 0) == present) return true;
            std::this_thread::sleep_for(50ms);
        }
        return false;
    };
    erl.send_line("load 1");
    erl.wait_line("loaded bb_pm_1");
    ASSERT_TRUE(wait_for("bb_pm_1", true)) << "bb_pm_1 never showed up in " << ours;
    vm_map = read_map(theirs), our_map = read_map(ours);
    // Its header, footer, and six functions (sum/1, twice/1, name/0, module_info/0,1, a fun) each
    // with its prologue.
    EXPECT_EQ(count_module(our_map, "bb_pm_1"), 14u);
    EXPECT_EQ(our_map, vm_map) << "only the VM's:\n"
                               << diff(vm_map, our_map) << "only ours:\n"
                               << diff(our_map, vm_map);

    erl.send_line("purge 1");
    erl.wait_line("purged bb_pm_1");
    const bool unregisters = vm().otp_release >= 27;
    if (unregisters) {
        EXPECT_TRUE(wait_for("bb_pm_1", false)) << "bb_pm_1 still in " << ours << " after its purge";
    } else {
        std::this_thread::sleep_for(500ms);
    }
    vm_map = read_map(theirs), our_map = read_map(ours);
    std::set<Line> vm_live;
    for (const auto& l : vm_map)
        if (!unregisters || !std::get<2>(l).starts_with("$bb_pm_1:")) vm_live.insert(l);
    EXPECT_EQ(our_map, vm_live) << "only the VM's:\n"
                                << diff(vm_live, our_map) << "only ours:\n"
                                << diff(our_map, vm_live);
    ToolResult r = finish_tool(t, true, 30s);
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    std::cout << "[          ] --follow: " << r.err;
}

class PerfmapTest : public RootTest {};

// A consumer reads it: perf names the Erlang code of a VM that writes no map of its own from
// ours. perf (and bcc) consult a perf map only for anonymous code mappings; the JIT maps its code
// anonymously with +JPperf (any mode) or +JMsingle true, and by default from a memfd, which they
// take for a file. OTP 27 has +JPperf fp: frame pointers, no map.
TEST_F(PerfmapTest, PerfNamesErlangCodeFromOurMap) {
    const TestVm& otp27 = vm_named("otp27");
    ASSERT_EQ(access((otp27.bin_dir + "/erl").c_str(), X_OK), 0) << "no OTP 27 test VM: scripts/build-test-vms.sh";
    const auto started = std::filesystem::file_time_type::clock::now();
    ErlVm erl(otp27, "bb_work:main(busy2)", {"+JPperf", "fp"});
    erl.wait_line("ready");
    const std::string pid = std::to_string(erl.os_pid()), map = "/tmp/perf-" + pid + ".map";
    // A map older than this VM is another's that had its pid (VMs run with +JPperf map leave
    // theirs behind, and pids wrap at 32,768 here): not this VM's doing.
    std::error_code ec;
    if (auto t = std::filesystem::last_write_time(map, ec); !ec && t < started - std::chrono::seconds(1))
        unlink(map.c_str());
    ASSERT_NE(access(map.c_str(), F_OK), 0) << "the VM wrote " << map << " itself";
    struct Remove {
        std::string path;
        ~Remove() { unlink(path.c_str()); }
    } remove{map};
    ToolResult w = run_tool(kTool, {pid}, 60s);
    ASSERT_EQ(w.exit_code, 0) << describe(w);
    const std::string data = ::testing::TempDir() + "/perfmap-perf.data";
    ToolResult rec = run_command({"perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-p", pid, "-o", data, "--",
                                  "sleep", "3"},
                                 60s);
    ASSERT_EQ(rec.exit_code, 0) << describe(rec);
    ToolResult script = run_command({"perf", "script", "-i", data, "-F", "ip,sym"}, 60s);  // sym alone prints nothing
    ASSERT_EQ(script.exit_code, 0) << describe(script);
    long all = 0, spin = 0;
    for (const auto& line : lines_of(script.out)) {
        all++;
        spin += line.find("$bb_work:spin_a/2") != std::string::npos ||
                line.find("$bb_work:spin_b/2") != std::string::npos;
    }
    std::cout << "[          ] perf: " << spin << " of " << all
              << " samples named bb_work:spin_a/2 or spin_b/2 from our map\n";
    // Two spinners: nearly every sample is in one of them (415 of 434 on a loaded machine); a
    // majority of at least 200 is far outside chance.
    ASSERT_GT(all, 200);
    EXPECT_GT(spin, all / 2) << script.out.substr(0, 2000);
}

TEST_F(PerfmapTest, NotABeamIsOneLine) {
    ChildProcess sleeper({"sleep", "60"});
    std::string line = expect_one_line_error(run_tool(kTool, {std::to_string(sleeper.pid())}, 30s), kTool);
    EXPECT_FALSE(line.empty());
    line = expect_one_line_error(run_tool(kTool, {std::to_string(dead_pid())}, 30s), kTool);
    EXPECT_FALSE(line.empty());
}

}  // namespace perfmap_test
