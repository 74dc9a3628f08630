// Finding the VM (issue 33): what a user gives for it (a wrapper's pid, a thread id, several
// pids, a node name, an Erlang process that is not there, -d 0) ends in a run of the right VM
// or one line saying what to give instead; never a crash or a silent empty run. Real VMs, real BPF.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <fstream>
#include <regex>
#include <thread>

#include "harness.hpp"

namespace finding_test {

using namespace bbt;

const std::string kTool = "beam-bpf-sample";

std::string erl() { return debian_vm().bin_dir + "/erl"; }

// Parent pid from /proc/PID/stat (0 if gone).
pid_t parent_of(pid_t pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
    std::string stat((std::istreambuf_iterator<char>(in)), {});
    size_t close = stat.rfind(')');
    return close == std::string::npos ? 0 : std::atoi(stat.c_str() + close + 4);
}

// The beam.smp children of `parent`, waited for until there are `want`.
std::vector<pid_t> beam_children(pid_t parent, size_t want) {
    std::vector<pid_t> out;
    for (int i = 0; i < 200 && out.size() < want; i++) {
        out.clear();
        std::unique_ptr<DIR, int (*)(DIR*)> d(opendir("/proc"), closedir);
        while (dirent* e = readdir(d.get())) {
            pid_t p = std::atoi(e->d_name);
            if (p <= 0 || parent_of(p) != parent) continue;
            std::ifstream comm("/proc/" + std::to_string(p) + "/comm");
            std::string name;
            std::getline(comm, name);
            if (name == "beam.smp") out.push_back(p);
        }
        std::sort(out.begin(), out.end());
        if (out.size() < want) std::this_thread::sleep_for(50ms);
    }
    return out;
}

// A wrapper script, as erl run by sh (or elixir, rabbitmq-server): sh stays the parent of the
// VMs it starts. Killing sh does not kill them: the destructor kills them first.
struct Wrapper {
    ChildProcess sh;
    std::vector<pid_t> vms;
    Wrapper(const std::string& script, size_t n) : sh({"sh", "-c", script}), vms(beam_children(sh.pid(), n)) {}
    ~Wrapper() {
        for (pid_t v : vms) kill(v, SIGKILL);
    }
};

// A VM that halts by itself within a minute, should the test die before killing it.
std::string erl_line() { return erl() + " -noshell -eval 'timer:sleep(60000), halt().'"; }

class FindingTest : public RootTest {};

// 1. A wrapper's pid is its VM's.
TEST_F(FindingTest, WrapperPidProfilesItsVm) {
    Wrapper w(erl_line() + "; true", 1);
    ASSERT_EQ(w.vms.size(), 1u);
    ToolResult r = run_tool(kTool, {"-d", "1", std::to_string(w.sh.pid())}, 60s);
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.err.find("pid " + std::to_string(w.sh.pid()) + " is sh; profiling its VM, beam.smp pid " +
                         std::to_string(w.vms[0])),
              std::string::npos)
        << describe(r);
    EXPECT_NE(r.err.find("(pid " + std::to_string(w.vms[0]) + ","), std::string::npos) << describe(r);
}

TEST_F(FindingTest, WrapperWithTwoVmsIsRefused) {
    Wrapper w(erl_line() + " & " + erl_line() + "; wait", 2);
    ASSERT_EQ(w.vms.size(), 2u);
    ToolResult r = run_tool(kTool, {"-d", "1", std::to_string(w.sh.pid())}, 60s);
    std::string line = expect_one_line_error(r, kTool);
    EXPECT_NE(line.find("started 2 VMs: beam.smp pid " + std::to_string(w.vms[0])), std::string::npos) << line;
    EXPECT_NE(line.find("beam.smp pid " + std::to_string(w.vms[1])), std::string::npos) << line;
}

// 2. A thread id (top -H) is its process's.
TEST_F(FindingTest, ThreadIdProfilesItsProcess) {
    ErlVm vm("bb_work:main(idle)");
    vm.wait_line("ready");
    pid_t tid = 0;
    std::unique_ptr<DIR, int (*)(DIR*)> d(opendir(("/proc/" + std::to_string(vm.os_pid()) + "/task").c_str()),
                                          closedir);
    while (dirent* e = readdir(d.get()))
        if (pid_t t = std::atoi(e->d_name); t > 0 && t != vm.os_pid()) tid = t;
    ASSERT_NE(tid, 0);
    ToolResult r = run_tool(kTool, {"-d", "1", std::to_string(tid)}, 60s);
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.err.find("pid " + std::to_string(tid) + " is thread "), std::string::npos) << describe(r);
    EXPECT_NE(r.err.find("profiling process " + std::to_string(vm.os_pid())), std::string::npos) << describe(r);
}

// 3. Several pids ($(pgrep beam.smp) with two VMs): one line naming each.
TEST_F(FindingTest, SeveralPidsAreOneLine) {
    ErlVm a("bb_work:main(idle)", {"-sname", "bbfind_a"}), b("bb_work:main(idle)", {"-sname", "bbfind_b"});
    a.wait_line("ready");
    b.wait_line("ready");
    const std::string pa = std::to_string(a.os_pid()), pb = std::to_string(b.os_pid());
    ToolResult r = run_tool(kTool, {"-d", "1", pa, pb}, 30s);
    std::string line = expect_one_line_error(r, kTool);
    EXPECT_NE(line.find("several pids given (" + pa + ", " + pb + "): profile one VM at a time"), std::string::npos)
        << line;
    EXPECT_NE(line.find("node " + sname_node("bbfind_a")), std::string::npos) << line;
    EXPECT_NE(line.find("node " + sname_node("bbfind_b")), std::string::npos) << line;
}

// 4. --process: a pid that is not there, Elixir's spellings, a misspelled name.
TEST_F(FindingTest, ProcessIsCheckedAtStart) {
    ErlVm vm("bb_work:main(procs)");
    vm.wait_line("ready");
    const std::string pid = std::to_string(vm.os_pid());
    ToolResult missing = run_tool(kTool, {"-d", "1", "--process", "<0.9999.0>", pid}, 30s);
    EXPECT_NE(expect_one_line_error(missing, kTool).find("--process <0.9999.0>: no such process in the VM"),
              std::string::npos);
    ToolResult atom = run_tool(kTool, {"-d", "1", "--process", ":bb_queue", pid}, 30s);
    EXPECT_EQ(atom.exit_code, 0) << describe(atom);
    EXPECT_NE(atom.err.find("--process :bb_queue is <0."), std::string::npos) << describe(atom);
    ToolResult module = run_tool(kTool, {"-d", "1", "--process", "BbProcs.Worker", pid}, 30s);
    EXPECT_EQ(module.exit_code, 0) << describe(module);
    ToolResult typo = run_tool(kTool, {"-d", "1", "--process", "bb_queu", pid}, 30s);
    EXPECT_NE(expect_one_line_error(typo, kTool).find("did you mean bb_queue"), std::string::npos);
}

// 5. -d 0 is a mistake, not "forever".
TEST_F(FindingTest, DurationZeroIsAnError) {
    ToolResult r = run_tool(kTool, {"-d", "0", "1"}, 10s);
    EXPECT_NE(expect_one_line_error(r, kTool).find("-d 0: a duration of at least 0.1 s; omit -d to run until Ctrl-C"),
              std::string::npos);
}

// 6. An idle VM's empty run says why.
TEST_F(FindingTest, IdleVmSaysSo) {
    ErlVm vm("bb_work:main(idle)");
    vm.wait_line("ready");
    ToolResult r = run_tool(kTool, {"-d", "3", std::to_string(vm.os_pid())}, 30s);
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_TRUE(
        std::regex_search(r.err, std::regex(R"(: \d samples: the VM's schedulers were idle for the whole 3\.\d s)")))
        << describe(r);
}

// 7. Init is not a BEAM, whatever may be read of it.
TEST_F(FindingTest, InitIsNotABeam) {
    ToolResult r = run_tool(kTool, {"-d", "1", "1"}, 10s);
    std::string line = expect_one_line_error(r, kTool);
    EXPECT_NE(line.find("process 1 ("), std::string::npos) << line;
    EXPECT_NE(line.find("is not a BEAM VM"), std::string::npos) << line;
}

// 8. beam-bpf-vms lists them; --node picks one, in every tool that takes a PID.
TEST_F(FindingTest, VmsListsAndNodeSelects) {
    ErlVm a("bb_work:main(idle)", {"-sname", "bbfind_c"}), b("bb_work:main(idle)", {"-sname", "bbfind_d"});
    a.wait_line("ready");
    b.wait_line("ready");
    ToolResult list = run_tool("beam-bpf-vms", {}, 30s);
    EXPECT_EQ(list.exit_code, 0) << describe(list);
    EXPECT_TRUE(std::regex_search(list.out,
                                  std::regex(std::to_string(a.os_pid()) + " +" + sname_node("bbfind_c") + " +- +25 ")))
        << describe(list);
    EXPECT_TRUE(
        std::regex_search(list.out, std::regex(std::to_string(b.os_pid()) + " +" + sname_node("bbfind_d") + " ")))
        << describe(list);

    ToolResult sample = run_tool(kTool, {"-d", "1", "--node", "bbfind_c"}, 60s);
    EXPECT_EQ(sample.exit_code, 0) << describe(sample);
    EXPECT_NE(sample.err.find("(pid " + std::to_string(a.os_pid()) + ","), std::string::npos) << describe(sample);
    ToolResult procs = run_tool("beam-bpf-procs", {"--node", "bbfind_d"}, 30s);
    EXPECT_EQ(procs.exit_code, 0) << describe(procs);
    EXPECT_NE(procs.out.find("beam.smp " + std::to_string(b.os_pid())), std::string::npos) << describe(procs);
    ToolResult blame = run_tool("beam-bpf-blame", {"-d", "1", "erts_garbage_collect", "--node", "bbfind_c"}, 60s);
    EXPECT_EQ(blame.exit_code, 0) << describe(blame);

    ToolResult none = run_tool(kTool, {"-d", "1", "--node", "bbfind_x"}, 30s);
    std::string line = expect_one_line_error(none, kTool);
    EXPECT_NE(line.find("--node bbfind_x: no VM has that node name"), std::string::npos) << line;
    EXPECT_NE(line.find(sname_node("bbfind_c") + " (pid"), std::string::npos) << line;
}

// 9. The node's name as node() gives it, read from the VM: -sname (the host added), -name, and
// net_kernel:start/2 at run time, where the command line has no name (RabbitMQ's way); found by
// --node as Erlang prints it, quoted or not, and by its short name. On OTP 29 (stripped, its
// symbols hidden) the name is found in the VM's data without a symbol.
class NodeNameVmTest : public VmTest {};

TEST_P(NodeNameVmTest, AsTheVmNamesItself) {
    const std::string tag = GetParam().name;
    const std::string s_name = sname_node("bbn_s_" + tag), l_name = "bbn_l_" + tag + "@host.example",
                      r_name = sname_node("bbn_r_" + tag);
    ErlVm s(vm(), "bb_work:main(idle)", {"-sname", "bbn_s_" + tag});
    ErlVm l(vm(), "bb_work:main(idle)", {"-name", l_name});
    ErlVm r(vm(), "io:format(\"waiting~n\"), io:get_line(''), {ok, _} = net_kernel:start([bbn_r_" + tag +
                      ", shortnames]), bb_work:main(idle)");
    s.wait_line("ready");
    l.wait_line("ready");
    r.wait_line("waiting");
    auto row = [](const ToolResult& list, const ErlVm& v, const std::string& node) {
        return std::regex_search(list.out, std::regex("\n" + std::to_string(v.os_pid()) + " +" + node + " +- "));
    };
    ToolResult before = run_tool("beam-bpf-vms", {}, 30s);
    EXPECT_TRUE(row(before, s, s_name)) << describe(before);
    EXPECT_TRUE(row(before, l, std::regex_replace(l_name, std::regex("\\."), "\\."))) << describe(before);
    EXPECT_TRUE(row(before, r, "-")) << "not distributed yet: " << describe(before);

    r.send_line("go");
    r.wait_line("ready");
    ToolResult after = run_tool("beam-bpf-vms", {}, 30s);
    EXPECT_TRUE(row(after, r, r_name)) << describe(after);

    for (const auto& [given, v] : std::vector<std::pair<std::string, const ErlVm*>>{
             {s_name, &s}, {"'" + l_name + "'", &l}, {l_name, &l}, {"bbn_r_" + tag, &r}, {r_name, &r}}) {
        ToolResult procs = run_tool("beam-bpf-procs", {"--node", given, "-t", "1"}, 30s);
        EXPECT_EQ(procs.exit_code, 0) << given << ": " << describe(procs);
        EXPECT_NE(procs.out.find("beam.smp " + std::to_string(v->os_pid())), std::string::npos)
            << given << ": " << describe(procs);
    }
}

INSTANTIATE_TEST_SUITE_P(Vms, NodeNameVmTest, ::testing::ValuesIn(release_vms()), test_vm_name);

}  // namespace finding_test
