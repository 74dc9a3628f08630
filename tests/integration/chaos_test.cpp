// Hostile conditions for the tools, against real VMs on real BPF: a VM with 100,000
// processes (tests/workloads/bb_chaos.erl), and a profiler that is not root but holds only the
// three capabilities the README names (granted with capsh, from libcap2-bin). These tests need
// root (to start the VMs and to hand out the capabilities) and never skip.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "harness.hpp"

namespace chaos_test {

using namespace bbt;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

const std::string kTool = "beam-bpf-sample";
const std::string kBlame = "beam-bpf-blame";

std::string pid_arg(const ErlVm& vm) { return std::to_string(vm.os_pid()); }

double pct(long part, long whole) { return whole ? 100.0 * double(part) / double(whole) : 0; }

long total(const std::map<std::string, long>& stacks) {
    long n = 0;
    for (const auto& [stack, count] : stacks) n += count;
    return n;
}

bool is_erlang_frame(const std::string& frame) {
    static const std::regex mfa(R"(^[^:;\s]+:[^;\s]+/\d+$)");
    return std::regex_match(frame, mfa);
}

std::vector<std::string> erlang_frames(const std::string& stack) {
    std::vector<std::string> erl;
    for (auto& f : split_frames(stack))
        if (is_erlang_frame(f)) erl.push_back(f);
    return erl;
}

// Samples of the stacks that contain `leaf`, and of those whose Erlang frames are exactly
// `chain` (root first): a sample in the kernel or in VM code under the leaf still counts.
struct ChainCount {
    long with_leaf = 0, exact = 0;
};
ChainCount count_chain(const std::map<std::string, long>& stacks, const std::string& leaf,
                       const std::vector<std::string>& chain) {
    ChainCount c;
    for (const auto& [stack, count] : stacks) {
        auto frames = split_frames(stack);
        if (std::find(frames.begin(), frames.end(), leaf) == frames.end()) continue;
        c.with_leaf += count;
        if (erlang_frames(stack) == chain) c.exact += count;
    }
    return c;
}

// The stacks (with counts) that contain `leaf` but not exactly `chain`, for failure messages.
std::string other_stacks(const std::map<std::string, long>& stacks, const std::string& leaf,
                         const std::vector<std::string>& chain) {
    std::string s;
    for (const auto& [stack, count] : stacks)
        if (stack.find(leaf) != std::string::npos && erlang_frames(stack) != chain)
            s += "  " + stack + " " + std::to_string(count) + "\n";
    return s.empty() ? "  (none)\n" : s;
}

// --pstack output: `scheduler N (tid T): <pid> [name]|idle` then the frames, leaf first, indented.
// Dirty schedulers (`dirty cpu scheduler N ...`) are listed too; only the process matters here.
std::map<std::string, std::vector<std::string>> pstack_by_process(const std::string& out) {
    static const std::regex head(R"(^(dirty (cpu|io) )?scheduler \d+ \(tid \d+\): (\S+)( .*)?$)");
    std::map<std::string, std::vector<std::string>> by_pid;
    std::vector<std::string>* current = nullptr;
    for (const auto& line : lines_of(out)) {
        std::smatch m;
        if (std::regex_match(line, m, head)) {
            current = m[3] == "idle" ? nullptr : &by_pid[m[3]];
            if (current && !current->empty()) ADD_FAILURE() << m[3] << " on two schedulers:\n" << out;
        } else if (line[0] == ' ' || line[0] == '\t') {
            if (current) current->push_back(line.substr(line.find_first_not_of(" \t")));
        } else {
            ADD_FAILURE() << "unexpected --pstack line: '" << line << "'";
        }
    }
    return by_pid;
}

// --- 100,000 processes -------------------------------------------------------------------

// What the attach and the walk read does not grow with the number of processes (the live
// checks look at up to 64 table slots; the walker reads only the process a scheduler runs),
// so a VM with 100,000 idle processes must be profiled as quickly and as exactly as an empty
// one. The idlers never run, so no sample may name them; the two busy processes must show
// with exact caller chains, in the profile and in --pstack.
class ChaosManyProcessesTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, ChaosManyProcessesTest, ::testing::ValuesIn(release_vms()), test_vm_name);

const long kIdlers = 100000;
const std::string kSpinX = "bb_chaos:spin_x/2", kCallerX = "bb_chaos:caller_x/1";
const std::string kSpinY = "bb_chaos:spin_y/2", kCallerY = "bb_chaos:caller_y/1";

TEST_P(ChaosManyProcessesTest, HundredThousandProcesses) {
    // +P: room for the idlers (the default limit is 262,144 but say it); +S 2: one normal
    // scheduler per busy process, so --pstack can see both at once.
    const auto vm_started = Clock::now();
    ErlVm erl(vm(), "bb_chaos:main(many, " + std::to_string(kIdlers) + ")", {"+P", "300000", "+S", "2"});
    std::istringstream ready(erl.wait_line("ready", 60s));
    const double spawn_s = std::chrono::duration<double>(Clock::now() - vm_started).count();
    std::string word, pid_x, pid_y;
    long processes = 0;
    ready >> word >> pid_x >> pid_y >> processes;
    ASSERT_TRUE(pid_x.starts_with("<") && pid_y.starts_with("<")) << erl.output();
    ASSERT_GE(processes, kIdlers + 2) << erl.output();

    ToolResult r = run_tool(kTool, {"-d", "3", "--folded", pid_arg(erl)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    auto stacks = parse_folded(r.out);
    const auto x = count_chain(stacks, kSpinX, {kCallerX, kSpinX});
    const auto y = count_chain(stacks, kSpinY, {kCallerY, kSpinY});
    long idler = 0;
    for (const auto& [stack, count] : stacks)
        if (stack.find("bb_chaos:idler/0") != std::string::npos) idler += count;

    // A -d 3 run cannot be quick, so --pstack gives the time the attach itself takes.
    int both_inside = 0;
    double pstack_s = 0;
    std::string last_pstack;
    // As in SampleVmTest.Pstack: a process caught yielding at spin_x's entry shows shared or
    // native code above caller_x, not spin_x. Every snapshot must show both processes over
    // their callers; one of a few must catch both inside their spin function.
    for (int attempt = 0; attempt < 5 && both_inside == 0; attempt++) {
        ToolResult p = run_tool(kTool, {"--pstack", pid_arg(erl)}, 60s);
        ASSERT_EQ(p.exit_code, 0) << describe(p);
        pstack_s = p.seconds;
        last_pstack = p.out;
        auto by_pid = pstack_by_process(p.out);
        int inside = 0;
        for (auto [pid, leaf, caller] : {std::tuple{pid_x, kSpinX, kCallerX}, std::tuple{pid_y, kSpinY, kCallerY}}) {
            ASSERT_TRUE(by_pid.count(pid)) << pid << " not on any scheduler\n" << p.out;
            const auto& f = by_pid[pid];
            auto at_caller = std::find(f.begin(), f.end(), caller);
            ASSERT_TRUE(at_caller != f.end()) << pid << " should show " << caller << "\n" << p.out;
            EXPECT_TRUE(at_caller + 1 == f.end()) << caller << " should be " << pid << "'s bottom frame\n" << p.out;
            if (std::find(f.begin(), at_caller, leaf) != at_caller) {
                inside++;
            } else {
                for (auto it = f.begin(); it != at_caller; ++it)
                    EXPECT_FALSE(is_erlang_frame(*it)) << pid << ": " << *it << " above " << caller << "\n" << p.out;
            }
        }
        if (inside == 2) both_inside++;
    }

    std::cout << std::fixed << std::setprecision(2) << vm().name << ": " << processes << " processes, ready " << spawn_s
              << " s after start; -d 3 --folded took " << r.seconds << " s: " << x.with_leaf << " samples in spin_x ("
              << pct(x.exact, x.with_leaf) << "% exactly caller_x;spin_x), " << y.with_leaf << " in spin_y ("
              << pct(y.exact, y.with_leaf) << "% exactly caller_y;spin_y), " << idler << " in idlers, of "
              << total(stacks) << " samples; --pstack took " << pstack_s << " s:\n"
              << last_pstack;

    // Sanity limits only: a walk or attach that scanned the process table would take minutes.
    EXPECT_LT(r.seconds, 30.0) << describe(r);
    EXPECT_LT(pstack_s, 30.0);
    // Samples follow the CPU time the VM gets: 3 s at 999 Hz is ~3000 per busy process on a
    // free machine, a third of that when other tests share the two cores. So a loose floor,
    // and the share of the VM's samples, which does not depend on the load: the two spinners
    // are all that runs (the rest is the VM's own threads).
    const long all = total(stacks);
    EXPECT_GE(x.with_leaf, 300) << describe(r);
    EXPECT_GE(y.with_leaf, 300) << describe(r);
    EXPECT_GE(pct(x.with_leaf + y.with_leaf, all), 80.0) << describe(r);
    EXPECT_GE(pct(x.exact, x.with_leaf), 99.0) << other_stacks(stacks, kSpinX, {kCallerX, kSpinX});
    EXPECT_GE(pct(y.exact, y.with_leaf), 99.0) << other_stacks(stacks, kSpinY, {kCallerY, kSpinY});
    EXPECT_EQ(idler, 0) << "samples named an idle process that never runs\n" << r.out.substr(0, 4000);
    EXPECT_EQ(both_inside, 1) << "no snapshot of 5 caught both processes inside spin_x and spin_y";
}

// --- only CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE ------------------------------------------

// A user other than root, already used by SampleVmTest.ErrorUnprivileged; present on every
// Debian system, so the test creates nothing.
const std::string kUser = "nobody";
const std::string kCaps = "cap_bpf,cap_perfmon,cap_sys_ptrace";

// The tools copied to a fresh directory that `kUser` can reach: the build directory's parents
// (a CI checkout under /root, say) may be closed to it, and a path it cannot traverse would make
// the test fail for a reason that has nothing to do with capabilities.
class ToolCopy {
public:
    ToolCopy() {
        char tmpl[] = "/tmp/bb-caps-XXXXXX";
        if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
        dir_ = tmpl;
        fs::permissions(dir_, fs::perms(0755));
        for (const auto& tool : {kTool, kBlame}) {
            fs::copy_file(tools_dir() + "/" + tool, path(tool));
            fs::permissions(path(tool), fs::perms(0755));
        }
    }
    ~ToolCopy() {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    std::string path(const std::string& tool) const { return dir_ + "/" + tool; }

private:
    std::string dir_;
};

// `prog args` run by capsh as `kUser`, with `caps` (capsh syntax, e.g. "cap_bpf,cap_perfmon")
// as its permitted, effective and ambient sets and nothing else: --keep=1 keeps root's
// permitted set across the uid change, --inh and --addamb raise `caps` in the inheritable and
// ambient sets, and the exec of `prog` (a file with no capabilities of its own) leaves it the
// ambient set alone. capsh execs `prog` itself (--shell=), so the pid we wait for is the tool's.
// stdout and stderr go to files (no pipe to drain); SIGKILL at `timeout`.
ToolResult run_with_caps(const std::string& prog, const std::vector<std::string>& args, const std::string& caps,
                         std::chrono::milliseconds timeout = 60s) {
    std::vector<std::string> argv{"capsh",           "--keep=1", "--user=" + kUser, "--inh=" + caps, "--addamb=" + caps,
                                  "--shell=" + prog, "--"};
    argv.insert(argv.end(), args.begin(), args.end());
    const std::string base = ::testing::TempDir() + "bb_caps_" + std::to_string(getpid());
    // The figures checked come from --stats (written by the tool as kUser, in a world-writable dir).
    const std::string stats_path = base + ".stats.json";
    const bool profiler = prog.ends_with("beam-bpf-sample") || prog.ends_with("beam-bpf-blame");
    if (profiler) {
        std::remove(stats_path.c_str());
        argv.insert(argv.end() - static_cast<long>(args.size()), {"--stats", stats_path});
    }
    const std::string out_path = base + ".out", err_path = base + ".err";
    int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (out < 0 || err < 0 || null < 0) throw std::runtime_error("cannot open " + base + ".*");
    std::vector<char*> cargv;
    for (auto& a : argv) cargv.push_back(a.data());
    cargv.push_back(nullptr);

    const auto started = Clock::now();
    pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
        // capsh's uid change clears the death signal again; the tools' runs are bounded (-d).
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (dup2(null, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0) _exit(127);
        signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        // The test's working directory (the build tree) may be closed to kUser.
        if (chdir("/") != 0) _exit(127);
        execvp(cargv[0], cargv.data());
        dprintf(2, "cannot exec capsh (package libcap2-bin): %s\n", strerror(errno));
        _exit(127);
    }
    close(out), close(err), close(null);
    int status = 0;
    bool killed = false;
    while (waitpid(pid, &status, WNOHANG) != pid) {
        if (Clock::now() - started > timeout) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            killed = true;
            break;
        }
        std::this_thread::sleep_for(20ms);
    }
    ToolResult r;
    r.seconds = std::chrono::duration<double>(Clock::now() - started).count();
    r.exit_code = (!killed && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
    auto slurp = [](const std::string& p) {
        std::ifstream in(p);
        return std::string(std::istreambuf_iterator<char>(in), {});
    };
    r.out = slurp(out_path);
    r.err = slurp(err_path);
    fs::remove(out_path);
    fs::remove(err_path);
    if (profiler) {
        std::ifstream in(stats_path);
        if (in) r.stats = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
        fs::remove(stats_path);
    }
    return r;
}

// The line `Name:\tvalue` of /proc/self/status as seen by a program run with `caps`.
std::map<std::string, std::string> status_with_caps(const std::string& caps) {
    ToolResult r = run_with_caps("/bin/cat", {"/proc/self/status"}, caps, 10s);
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    std::map<std::string, std::string> fields;
    for (const auto& line : lines_of(r.out))
        if (auto colon = line.find(':'); colon != std::string::npos)
            fields[line.substr(0, colon)] = line.substr(line.find_first_not_of(" \t", colon + 1));
    return fields;
}

// CAP_SYS_PTRACE 19, CAP_PERFMON 38, CAP_BPF 39 (linux/capability.h; libc's headers may
// predate the last two).
constexpr unsigned long long kThreeCaps = (1ull << 19) | (1ull << 38) | (1ull << 39);

// Run on Debian's OTP 25 (under /usr) and the OTP 27 build (under /var/tmp): the two installs
// whose files the user must be able to read. Capabilities do not depend on the emulator or the
// frame layout, which the other suites cover as root.
std::vector<TestVm> two_installs() {
    std::vector<TestVm> vms;
    for (const auto& v : test_vms())
        if (v.name == "otp25" || v.name == "otp27") vms.push_back(v);
    return vms;
}

class ChaosCapsTest : public VmTest {
protected:
    void SetUp() override {
        VmTest::SetUp();
        if (HasFatalFailure()) return;
        // The test's premise: capsh gives exactly the three capabilities to a non-root user.
        auto st = status_with_caps(kCaps);
        ASSERT_TRUE(st.count("CapEff")) << "capsh did not run (install libcap2-bin)";
        std::istringstream uid(st["Uid"]);
        long real = -1;
        uid >> real;
        ASSERT_GT(real, 0) << "Uid: " << st["Uid"];
        for (const char* set : {"CapPrm", "CapEff", "CapAmb"})
            ASSERT_EQ(std::stoull(st[set], nullptr, 16), kThreeCaps) << set << ": " << st[set];
    }
    ToolCopy tools_;
};
INSTANTIATE_TEST_SUITE_P(Vms, ChaosCapsTest, ::testing::ValuesIn(two_installs()), test_vm_name);

// The README's promise: root, or CAP_BPF + CAP_PERFMON + CAP_SYS_PTRACE. A VM owned by root,
// profiled by another user with just those: the BPF load and perf events (CAP_BPF,
// CAP_PERFMON), and everything read of the VM through /proc/PID and process_vm_readv
// (CAP_SYS_PTRACE, which overrides the ptrace access check but not file modes: root's
// /proc/PID/auxv and /proc/PID/mem, mode 0400 and 0600, stay closed).
TEST_P(ChaosCapsTest, SampleWithOnlyThreeCapabilities) {
    ErlVm erl(vm(), "bb_work:main(busy2)", {"+S", "2"});
    erl.wait_line("ready");

    ToolResult r = run_with_caps(tools_.path(kTool), {"-d", "3", "--folded", pid_arg(erl)}, kCaps);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    auto stacks = parse_folded(r.out);
    const auto a = count_chain(stacks, "bb_work:spin_a/2", {"bb_work:caller_a/1", "bb_work:spin_a/2"});
    const auto b = count_chain(stacks, "bb_work:spin_b/2", {"bb_work:caller_b/1", "bb_work:spin_b/2"});
    std::cout << vm().name << " as " << kUser << " with " << kCaps << ": " << r.seconds << " s, "
              << stat(r, "records").value_or(-1) << " samples, " << a.with_leaf << " in spin_a ("
              << pct(a.exact, a.with_leaf) << "% exact chain), " << b.with_leaf << " in spin_b ("
              << pct(b.exact, b.with_leaf) << "% exact chain)\n"
              << r.err;
    // Loose floors and a share, as in HundredThousandProcesses: the counts follow the load.
    const long all = total(stacks);
    EXPECT_GE(a.with_leaf, 300) << describe(r);
    EXPECT_GE(b.with_leaf, 300) << describe(r);
    EXPECT_GE(pct(a.with_leaf + b.with_leaf, all), 80.0) << describe(r);
    EXPECT_GE(pct(a.exact, a.with_leaf), 99.0) << describe(r);
    EXPECT_GE(pct(b.exact, b.with_leaf), 99.0) << describe(r);
    // Not root must not mean unnamed: JIT code is read with process_vm_readv, native symbols
    // from the VM's binaries, which are world-readable. Only the vDSO goes unnamed (libdwfl
    // finds it through /proc/PID/auxv and reads it from /proc/PID/mem, both closed to this
    // user): its clock_gettime, a fraction of a percent of the VM's samples.
    const long unsymbolized = stat(r, "unsymbolized_frames").value_or(-1);
    EXPECT_GE(unsymbolized, 0) << describe(r);
    EXPECT_LE(pct(unsymbolized, all), 1.0) << describe(r);

    // Each capability is needed: without CAP_PERFMON the tool says which one is missing,
    // in one line, before it tries anything.
    ToolResult n = run_with_caps(tools_.path(kTool), {"-d", "3", pid_arg(erl)}, "cap_bpf,cap_sys_ptrace");
    std::string line = expect_one_line_error(n, kTool);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(line, m, std::regex("missing ([^;]+);"))) << line;
    EXPECT_EQ(m[1], "CAP_PERFMON") << line;
}

// beam-bpf-blame samples like beam-bpf-sample, so the same three capabilities suffice. --count
// places a uprobe, and the kernel has required CAP_SYS_ADMIN for uprobe perf events since
// "perf: Require CAP_SYS_ADMIN for uprobes" (2025, in stable kernels too; CAP_PERFMON was
// enough before): with the three capabilities --count either works (an older kernel) or fails
// with the one-line error; with CAP_SYS_ADMIN added it must work.
TEST_P(ChaosCapsTest, BlameWithOnlyThreeCapabilities) {
    ErlVm erl(vm(), "bb_work:main(alloc_arith)");
    erl.wait_line("ready");

    ToolResult r = run_with_caps(tools_.path(kBlame), {"-d", "3", "erts_garbage_collect", pid_arg(erl)}, kCaps);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::cout << vm().name << " blame with " << kCaps << ":\n" << r.out.substr(0, 600) << r.err;
    EXPECT_TRUE(r.out.find("bb_work:alloc_loop/0") != std::string::npos ||
                r.out.find("bb_work:build/2") != std::string::npos)
        << "the allocating process is not blamed for GC\n"
        << describe(r);
    EXPECT_EQ(r.out.find("bb_work:arith"), std::string::npos) << describe(r);

    ToolResult c = run_with_caps(tools_.path(kBlame), {"--count", "-d", "3", "erts_garbage_collect", pid_arg(erl)},
                                 kCaps);
    std::cout << vm().name << " blame --count with " << kCaps << ": exit " << c.exit_code << "\n" << c.err;
    if (c.exit_code != 0) {
        std::string line = expect_one_line_error(c, kBlame);
        EXPECT_NE(line.find("CAP_SYS_ADMIN for uprobes"), std::string::npos) << line;
    }

    ToolResult s = run_with_caps(tools_.path(kBlame), {"--count", "-d", "3", "erts_garbage_collect", pid_arg(erl)},
                                 kCaps + ",cap_sys_admin");
    ASSERT_EQ(s.exit_code, 0) << describe(s);
    EXPECT_TRUE(s.out.find("bb_work:alloc_loop/0") != std::string::npos ||
                s.out.find("bb_work:build/2") != std::string::npos)
        << describe(s);
    EXPECT_GT(stat(s, "records").value_or(0), 0) << describe(s);
}

}  // namespace chaos_test
