// Integration-test harness: real `erl` VMs running the workloads in tests/workloads, and the
// real tools run as child processes. Nothing here mocks the VM or the kernel.
//
// Every child (VM or tool) gets PR_SET_PDEATHSIG=SIGKILL and is killed by its owner's
// destructor, so nothing outlives the test binary, even when a test fails half-way.
#pragma once
#include <nlohmann/json.hpp>
#include <gtest/gtest.h>
#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bbt {

using namespace std::chrono_literals;

// A VM build the integration tests run on: its bin/ (erl and erlc) and the arguments that pick
// its emulator and frame layout.
struct TestVm {
    std::string name;               // "otp25", "otp27_lcnt_fp", ...: a test-name suffix
    std::string bin_dir;            // holds erl and erlc
    std::vector<std::string> args;  // e.g. {"-emu_type", "lcnt"}, {"+JPperf", "true"}
    int otp_release = 0;
    bool frame_pointers = false;
    // How to start it when not bin_dir/erl: a launcher (erlexec) and the environment it needs.
    std::vector<std::string> launcher;
    std::vector<std::string> env;
    // Its binary names the VM's C functions (false for the stripped OTP 29: blame and -e alloc
    // refuse it in one line unless a debug file is found).
    bool functions_named = true;
};

// The test matrix. The VMs: Debian's OTP 25 (/usr/bin); the OTP 27 build of
// scripts/build-test-vms.sh 27, stripped (its plain beam.smp, and its lock-counting one with
// -emu_type lcnt); the OTP 29 build of scripts/build-test-vms.sh 29, stripped ("otp29": no
// symbol of the VM's globals left) and as `make install` leaves it ("otp29_dwarf": symbols and
// DWARF); each without and with frame pointers ("_fp": +JPperf true). BB_OTP27_PREFIX and
// BB_OTP29_DIR override where the builds are. A missing build fails the tests that use it,
// saying how to make it: it is never skipped.
//
// Which VMs a suite runs on (CI's time is bounded: each VM costs every test of the suite):
//  - test_vms(): a test of what differs between releases and builds (the stack walk and its
//    shares, struct offsets, pids, process names and memory, the JIT index, native frames,
//    perf maps). Every release, both forms of 29, frame pointers on and off, lock counting.
//  - layout_vms(): for the long statistical runs of the Erlang stack walk (shares, deep
//    recursion, --pstack): each release, each frame layout, lock counting and both forms of 29,
//    each at least once (otp25, otp27_lcnt_fp, otp29, otp29_dwarf_fp); otp25_fp and otp27 add
//    no layout, offset or way of finding the VM's globals that these four leave out, and run
//    every test_vms() suite.
//  - probe_vms(): the same for tests that need the VM's own C functions by name (uprobes for
//    blame and -e alloc, a native frame checked by name): layout_vms() but the stripped 29,
//    which has no symbol for them (DebugFileTest covers it: refused in one line, then profiled
//    with its debug file from a local debuginfod).
//  - release_vms(): one VM of each release, for the rest (hostile input, churn, reloads,
//    reports): what they test does not depend on the build beyond its release.
const std::vector<TestVm>& test_vms();
const std::vector<TestVm>& layout_vms();
const std::vector<TestVm>& probe_vms();
const std::vector<TestVm>& release_vms();
// Every VM above and the combinations the matrix leaves out (otp27_fp, otp27_lcnt, otp29_fp,
// otp29_dwarf), for a test that needs one by name.
const std::vector<TestVm>& known_vms();
const TestVm& vm_named(const std::string& name);
const TestVm& debian_vm();  // the first of them: OTP 25, no frame pointers
// gtest prints a TestVm parameter by its name.
void PrintTo(const TestVm& vm, std::ostream* os);
// For INSTANTIATE_TEST_SUITE_P's name generator.
std::string test_vm_name(const ::testing::TestParamInfo<TestVm>& info);

// A running Erlang VM. The workload module(s) in tests/workloads are compiled once per release
// (that release's erlc into a temp dir); the VM runs
// `erl -noshell -pa DIR <vm args> <extra_args> -eval EXPR`.
// `erl` execs beam.smp, so os_pid() is the beam.smp pid. The destructor kills the VM.
// The VM's stderr goes to the same pipe as its stdout, so crash reports show up in errors.
class ErlVm {
public:
    explicit ErlVm(const std::string& eval_expr, std::vector<std::string> extra_args = {})
        : ErlVm(debian_vm(), eval_expr, std::move(extra_args)) {}
    ErlVm(const TestVm& vm, const std::string& eval_expr, std::vector<std::string> extra_args = {});
    ~ErlVm();
    ErlVm(const ErlVm&) = delete;
    ErlVm& operator=(const ErlVm&) = delete;

    pid_t os_pid() const { return pid_; }
    // Next stdout line that starts with `prefix` (earlier lines are dropped); throws on timeout
    // or VM exit, with what the VM printed so far.
    std::string wait_line(const std::string& prefix, std::chrono::milliseconds timeout = 20s);
    // Writes `line` + "\n" to the VM's stdin (workloads read commands with io:get_line/1).
    void send_line(const std::string& line);
    // SIGKILL and reap; os_pid() keeps the old value.
    void kill_now();
    // Everything the VM printed so far, for failure messages.
    const std::string& output() const { return seen_; }

private:
    pid_t pid_ = -1;
    bool reaped_ = false;
    int in_fd_ = -1, out_fd_ = -1;
    std::string buf_;   // read but not yet consumed by wait_line
    std::string seen_;  // all output
};

// A file's bytes ("" if it cannot be read).
std::string read_file(const std::string& path);
// Where the tools the tests run are: the build's (BB_BIN_DIR), or $BB_TOOLS_DIR (the sanitized
// pass, scripts/sanitize.sh, runs this binary on build-san's tools).
std::string tools_dir();

// A loopback port nobody listens on now (for a server a test starts).
int free_port();

// The name node() gives a VM started with -sname `sname` on this host: "sname@host", the host
// name up to its first dot.
std::string sname_node(const std::string& sname);

// The directory holding the workloads compiled by `vm`'s erlc (compiled on first use).
const std::string& workload_beam_dir(const TestVm& vm);

struct ToolResult {
    int exit_code = -1;  // -1: killed by a signal or timed out
    std::string out, err;
    double seconds = 0;
    // The run's --stats JSON: beam-bpf-sample and beam-bpf-blame are always run with --stats
    // (a file of the harness's, unless the test names one); null if the tool wrote none.
    nlohmann::json stats;
};

// Runs one of the built tools ("beam-bpf-sample", "beam-bpf-blame") with `args`; kills it after
// `timeout`. With `as_user`, drops to that user (and its group) first, with no capabilities.
ToolResult run_tool(const std::string& tool, const std::vector<std::string>& args,
                    std::chrono::milliseconds timeout = 60s, const std::optional<std::string>& as_user = std::nullopt);

// Any other program to completion (the checkers of tests/consumers, say), searched in PATH.
ToolResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout = 180s);

// Starts a tool in the background; finish_tool() sends SIGINT (as Ctrl-C would) unless it has
// exited already, and collects it. A RunningTool that was never finished is killed by its
// destructor.
struct RunningTool {
    pid_t pid = -1;
    int out_fd = -1, err_fd = -1;
    std::string out, err;  // read so far (wait_stderr drains both pipes)
    std::chrono::steady_clock::time_point started{};
    std::string stats_file;   // the run's --stats file, read by collect()
    bool stats_owned = true;  // the harness's own (removed after), not the test's

    RunningTool() = default;
    RunningTool(RunningTool&& o) noexcept;
    RunningTool& operator=(RunningTool&& o) noexcept;
    ~RunningTool();
};
RunningTool start_tool(const std::string& tool, const std::vector<std::string>& args);
// The same, run by `wrapper` (a program that execs the rest of its arguments: setpriv, say).
RunningTool start_tool_under(const std::vector<std::string>& wrapper, const std::string& tool,
                             const std::vector<std::string>& args);
// Waits until the tool's stderr shows `marker` (e.g. the "attached" line); false on timeout/exit.
bool wait_stderr(RunningTool& t, const std::string& marker, std::chrono::milliseconds timeout, std::string* err_so_far);
// `seconds` counts from start_tool().
ToolResult finish_tool(RunningTool& t, bool send_sigint, std::chrono::milliseconds timeout = 30s);

// Base of the integration test fixtures: they load BPF and attach to root-owned VMs, so a
// run without root fails (never skips).
class RootTest : public ::testing::Test {
protected:
    void SetUp() override;
};

// The same, run once per test VM (INSTANTIATE_TEST_SUITE_P(Vms, X, ValuesIn(test_vms()),
// test_vm_name)); start() runs a workload on this test's VM.
class VmTest : public ::testing::TestWithParam<TestVm> {
protected:
    void SetUp() override;
    const TestVm& vm() const { return GetParam(); }
};

// For assertion messages: how the tool ended and what it said.
std::string describe(const ToolResult& r);
// The error contract: exit code > 0, exactly one stderr line, starting "TOOL: error: ".
// Returns that line ("" after a failed check).
std::string expect_one_line_error(const ToolResult& r, const std::string& tool);
// The non-empty lines of `text`.
std::vector<std::string> lines_of(const std::string& text);

// Folded output ("a;b;c 12" lines) as stack -> count. Malformed lines fail the test.
std::map<std::string, long> parse_folded(const std::string& text);

// tid -> (ns on a CPU, ns waiting on a run queue), of every thread of `pid` (schedstat).
using SchedStats = std::map<long, std::pair<double, double>>;
SchedStats schedstat(pid_t pid);
// The ns the threads of both readings waited on a run queue between them: time a clock inside
// the VM counts (a NIF's sleep and its wakeup's wait for a CPU) that is not time blocked.
double run_queue_waits(const SchedStats& before, const SchedStats& after);
// The ns the hypervisor has taken from this machine's CPUs, all of them (/proc/stat's steal): a
// thread running when its CPU is taken counts it neither on a CPU nor on a run queue in schedstat,
// and no block either, so wall - CPU - run queue counts it as blocked.
double steal_ns();

// Frames of a folded stack, root first.
std::vector<std::string> split_frames(const std::string& stack);

// A figure of the run from its --stats JSON: "records" (samples or calls), "dropped",
// "truncated", "unsymbolized_frames", ...; nullopt if the tool wrote no stats or lacks it.
std::optional<long> stat(const ToolResult& r, const std::string& key);

// Any other program (e.g. `sleep 60` as a non-BEAM target), killed by the destructor.
class ChildProcess {
public:
    explicit ChildProcess(const std::vector<std::string>& argv);
    ~ChildProcess();
    ChildProcess(const ChildProcess&) = delete;
    ChildProcess& operator=(const ChildProcess&) = delete;
    pid_t pid() const { return pid_; }

private:
    pid_t pid_ = -1;
};

// The pid of a child that has exited and been reaped: a pid with no process (until reused).
pid_t dead_pid();

}  // namespace bbt
