// Integration-test harness: real `erl` VMs running the workloads in tests/workloads, and the
// real tools run as child processes. Nothing here mocks the VM or the kernel.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bbt {

using namespace std::chrono_literals;

// A running Erlang VM. The workload module(s) in tests/workloads are compiled once per test
// binary (erlc into a temp dir); the VM runs `erl -noshell -pa DIR <extra_args> -eval EXPR`.
// `erl` execs beam.smp, so os_pid() is the beam.smp pid. The destructor kills the VM.
class ErlVm {
public:
    explicit ErlVm(const std::string& eval_expr, std::vector<std::string> extra_args = {});
    ~ErlVm();
    ErlVm(const ErlVm&) = delete;
    ErlVm& operator=(const ErlVm&) = delete;

    pid_t os_pid() const { return pid_; }
    // Next stdout line that starts with `prefix` (earlier lines are dropped); throws on timeout
    // or VM exit, with what the VM printed so far.
    std::string wait_line(const std::string& prefix, std::chrono::milliseconds timeout = 20s);
    // Writes `line` + "\n" to the VM's stdin (workloads read commands with io:get_line/1).
    void send_line(const std::string& line);
    void kill_now();

private:
    pid_t pid_ = -1;
    int in_fd_ = -1, out_fd_ = -1;
    std::string buf_;
};

struct ToolResult {
    int exit_code = -1;      // -1: killed by a signal or timed out
    std::string out, err;
    double seconds = 0;
};

// Runs one of the built tools ("beam-bpf-sample", "beam-bpf-blame") with `args`; kills it after
// `timeout`. With `as_user`, drops to that user (and its group) first, with no capabilities.
ToolResult run_tool(const std::string& tool, const std::vector<std::string>& args,
                    std::chrono::milliseconds timeout = 60s,
                    const std::optional<std::string>& as_user = std::nullopt);

// Starts a tool in the background; finish_tool() sends SIGINT (as Ctrl-C would) unless it has
// exited already, and collects it.
struct RunningTool {
    pid_t pid = -1;
    int out_fd = -1, err_fd = -1;
};
RunningTool start_tool(const std::string& tool, const std::vector<std::string>& args);
// Waits until the tool's stderr shows `marker` (e.g. the "attached" line); false on timeout/exit.
bool wait_stderr(RunningTool& t, const std::string& marker, std::chrono::milliseconds timeout,
                 std::string* err_so_far);
ToolResult finish_tool(RunningTool& t, bool send_sigint, std::chrono::milliseconds timeout = 30s);

// Folded output ("a;b;c 12" lines) as stack -> count. Malformed lines fail the test.
std::map<std::string, long> parse_folded(const std::string& text);

}  // namespace bbt
