// beam-bpf-sample -e wall against the VM's own view of the same run (tests/workloads/bb_wall.erl):
// 200 clients calling a gen_server that takes ~5 ms a call, 100 processes in a bare receive (half
// with 20 unmatched messages queued), 20 busy loops on 2 schedulers. An in-VM sampler takes 64
// random processes every 50 ms while the tool runs, and records process_info(P, [status,
// current_stacktrace, message_queue_len]) of each, and the VM's counters of runnable and active
// tasks at the same instants.
#include <unistd.h>

#include <cmath>
#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>

#include "harness.hpp"

namespace wall_test {

using namespace bbt;

const std::string kTool = "beam-bpf-sample";

// A place a process can be, as both sides can name it. process_info(P, status) of a runnable P
// is answered by P itself once a scheduler runs it (a signal it handles), so the VM's sampler
// says "running" of runnable processes: both are one state here ("active"), named by the
// function only (the tool names a running process by the function it was scheduled in at). The
// waiting ones: state, the top two frames and the queue's length bucket (but in a call, where
// the tool names the callee instead: the clients' gen:do_call/4, and the io:execute_request/3
// of the workload's main process reading its input with io:get_line/1).
std::string place(const std::string& state, const std::string& f1, const std::string& f2, const std::string& bucket) {
    if (state == "running" || state == "runnable") return "active " + f1;
    const bool call = f1 == "gen:do_call/4" || f1 == "io:execute_request/3";
    return state + " " + f1 + " " + f2 + (call ? "" : " " + bucket);
}

struct Shares {
    std::map<std::string, double> of;  // place -> weight
    double total = 0;
    double share(const std::string& k) const {
        auto it = of.find(k);
        return it == of.end() || total == 0 ? 0 : it->second / total;
    }
};

// The tool's folded profile: "[state];root;...;leaf;[receive, queue B] NANOSECONDS" lines, or
// "...;gen:do_call/4;[waiting for NAME, pid 0.N.0]". The weights by state and by callee of
// gen:do_call/4 go to `by_state` and `callees`.
Shares tool_places(const std::string& folded, std::map<std::string, double>& by_state,
                   std::map<std::string, double>& callees) {
    Shares s;
    for (const auto& [stack, ns] : parse_folded(folded)) {
        std::vector<std::string> f = split_frames(stack);
        EXPECT_GE(f.size(), 2u) << stack;
        if (f.size() < 2) continue;
        const std::string state = f.front().substr(1, f.front().size() - 2);
        f.erase(f.begin());
        std::string bucket = "-";
        if (f.back().starts_with("[receive, queue ")) {
            bucket = f.back().substr(16, f.back().size() - 17);
            f.pop_back();
        } else if (f.back().starts_with("[waiting for ")) {
            if (f.size() >= 2 && f[f.size() - 2] == "gen:do_call/4") callees[f.back()] += static_cast<double>(ns);
            f.pop_back();
        }
        EXPECT_FALSE(f.empty()) << stack;
        if (f.empty()) continue;
        const std::string caller = f.size() >= 2 ? f[f.size() - 2] : "-";
        s.of[place(state, f.back(), caller, bucket)] += static_cast<double>(ns);
        s.total += static_cast<double>(ns);
        by_state[state] += static_cast<double>(ns);
    }
    return s;
}

class WallVmTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, WallVmTest, ::testing::ValuesIn(release_vms()), test_vm_name);

TEST_P(WallVmTest, SharesAgreeWithTheVmsOwnSampler) {
    ErlVm erl(vm(), "bb_wall:main()", {"+S", "2"});
    std::istringstream ready(erl.wait_line("ready", 60s));
    std::string word, server;
    ready >> word >> server;
    const std::string vm_pid = std::to_string(erl.os_pid());
    const std::string prefix = ::testing::TempDir() + "bb_wall_" + std::to_string(getpid());
    RunningTool t = start_tool(kTool, {"-e", "wall", "-d", "12", "-f", "top,folded", "-o", prefix, vm_pid});
    std::string err;
    ASSERT_TRUE(wait_stderr(t, "attached", 30s, &err)) << err;
    erl.send_line("oracle_start");
    ToolResult r = finish_tool(t, false, 60s);
    erl.send_line("oracle_stop");
    ASSERT_EQ(r.exit_code, 0) << describe(r);

    Shares vm_side;
    double ticks = 0, queued = 0, active = 0, procs = 0;
    for (;;) {
        std::istringstream in(erl.wait_line("oracle", 30s));
        in >> word;
        if (word == "oracle_end") break;
        if (word == "oracle_tasks") {
            in >> ticks >> queued >> active >> procs;
            continue;
        }
        double n = 0;
        std::string state, f1, f2, bucket;
        in >> n >> state >> f1 >> f2 >> bucket;
        vm_side.of[place(state, f1, f2, bucket)] += n;
        vm_side.total += n;
    }
    std::map<std::string, double> by_state, callees;
    const Shares tool = tool_places(read_file(prefix + ".folded"), by_state, callees);
    const double n_tool = static_cast<double>(stat(r, "processes_profiled").value_or(0));
    ASSERT_GT(vm_side.total, 0);
    ASSERT_GT(ticks, 0);
    ASSERT_GT(n_tool, 0) << describe(r);

    // Every place either side puts at least 0.5% of process time in, within 3 points, and 3
    // points at least 3 standard deviations of the difference of two sample shares.
    std::map<std::string, bool> places;
    for (const auto& [k, w] : tool.of) places[k] = true;
    for (const auto& [k, w] : vm_side.of) places[k] = true;
    std::string table;
    int compared = 0;
    for (const auto& [k, _] : places) {
        const double a = tool.share(k), b = vm_side.share(k);
        if (std::max(a, b) < 0.005) continue;
        compared++;
        const double p = (a + b) / 2, sd = std::sqrt(p * (1 - p) * (1 / n_tool + 1 / vm_side.total));
        table += "  " + k + ": tool " + std::to_string(100 * a) + "%, VM " + std::to_string(100 * b) + "% (sd " +
                 std::to_string(100 * sd) + " points)\n";
        EXPECT_LE(3 * sd, 0.03) << k << ": too few samples for a 3-point tolerance";
        EXPECT_NEAR(a, b, 0.03) << k;
    }
    std::cout << "places (" << n_tool << " tool samples, " << vm_side.total << " of the VM's sampler):\n" << table;
    // The known truth: the clients wait in gen:do_call/4 (called from gen_server:call/3), the
    // receivers in wait_here/0 with their queues, the busy loops are active.
    EXPECT_GE(compared, 5) << table;
    EXPECT_GT(tool.share("waiting gen:do_call/4 gen_server:call/3"), 0.45) << table;
    EXPECT_GT(tool.share("waiting bb_wall:wait_here/0 - 10-99"), 0.10) << table;
    EXPECT_GT(tool.share("active bb_wall:busy/2"), 0.04) << table;

    // The callee of the clients waiting in gen:do_call/4: named for at least 99% of their
    // time, and it is the server (its registered name and pid), never anything else.
    const double in_calls = tool.of.at("waiting gen:do_call/4 gen_server:call/3");
    const std::string the_server = "[waiting for bb_wall_server, pid " + server.substr(1, server.size() - 2) + "]";
    std::string seen;
    for (const auto& [callee, ns] : callees) seen += "  " + callee + " " + std::to_string(ns / in_calls) + "\n";
    std::cout << "callees of gen:do_call/4 (share of its time):\n" << seen;
    EXPECT_GE(callees[the_server] / in_calls, 0.99) << seen;
    EXPECT_EQ(callees.size(), callees.count("[waiting for ?]") + 1) << seen;
    EXPECT_EQ(stat(r, "calls_unknown").value_or(-1) * 100 <= stat(r, "calls_named").value_or(0), true) << describe(r);

    // The table of called processes: the server first, its mean number of waiters the clients'
    // share of process time in the call times the VM's mean number of processes, within the
    // 3 points of the share above (about 11 waiters); itself mostly in its handle_call/3.
    const std::string top = read_file(prefix + ".txt");
    std::smatch row;
    ASSERT_TRUE(std::regex_search(
        top, row,
        std::regex(R"(\n *WAITERS +RUN% +CALLED PROCESS +MOST% +WHERE[^\n]*\n *([0-9.]+) +([0-9-]+) +(.*)\n)")))
        << top;
    const double waiters = std::stod(row[1]),
                 vm_waiters = vm_side.share("waiting gen:do_call/4 gen_server:call/3") * procs / ticks;
    std::cout << "called processes, first row: " << row[0].str().substr(1) << "the VM's mean waiters: " << vm_waiters
              << " (of " << procs / ticks << " processes)\n";
    EXPECT_TRUE(row[3].str().starts_with("bb_wall_server, pid " + server.substr(1, server.size() - 2) + " ")) << top;
    EXPECT_NE(row[3].str().find("bb_wall:handle_call/3"), std::string::npos) << top;
    EXPECT_NEAR(waiters, vm_waiters, 0.03 * procs / ticks) << top;
    for (const char* ext : {".txt", ".folded"}) std::filesystem::remove(prefix + ext);

    // Running against runnable, against the VM's run queues at the sampler's instants: the
    // share of processes queued for a scheduler, and of those and the running ones.
    const double tool_total = tool.total;
    const double runnable = by_state["runnable"] / tool_total, running = by_state["running"] / tool_total;
    const double vm_runnable = queued / procs, vm_active = active / procs;
    std::cout << "runnable: tool " << 100 * runnable << "%, VM's run queues " << 100 * vm_runnable
              << "%; running or runnable: tool " << 100 * (runnable + running) << "%, VM's active tasks "
              << 100 * vm_active << "%\n";
    // Those are means over `ticks` instants of counts of ~20 of ~360 processes: a difference of 3
    // points is 11 processes, many standard deviations of either mean.
    EXPECT_NEAR(runnable, vm_runnable, 0.03);
    EXPECT_NEAR(runnable + running, vm_active, 0.03);
    // At most the 2 schedulers' worth of processes run at once, and they are busy all along.
    const double seconds = r.stats.value("seconds", 0.0), mean_running = by_state["running"] / 1e9 / seconds;
    EXPECT_GT(mean_running, 1.3);
    EXPECT_LT(mean_running, 2.7);
}

// Stacks that change all the time (200 flippers woken every millisecond, bb_stacks.erl): each
// process's stack is read, then its Process again, and a stack that moved is read once more or
// left out; every stack the profile shows is one a flipper can have.
TEST_P(WallVmTest, ChangingStacksAreNeverShownWrong) {
    ErlVm erl(vm(), "bb_stacks:main(flip)");
    erl.wait_line("ready", 60s);
    const std::string f = "bb_stacks:flipper/1", sa = "bb_stacks:side_a/1", sb = "bb_stacks:side_b/1",
                      wa = "bb_stacks:wait_a/0", wb = "bb_stacks:wait_b/0";
    // Root first, as the profile has them; a process preempted between the calls is in
    // flipper/1 or side_x/1.
    const std::set<std::vector<std::string>> possible{{f}, {f, sa}, {f, sb}, {f, sa, wa}, {f, sb, wb}};
    const std::set<std::string> ours{f, sa, sb, wa, wb};
    ToolResult r = run_tool(
        kTool, {"-e", "wall", "-d", "3", "--per-tick", "300", "-f", "folded", std::to_string(erl.os_pid())}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    double shown = 0, running = 0;
    for (const auto& [stack, ns] : parse_folded(r.out)) {
        std::vector<std::string> frames = split_frames(stack);
        if (!std::ranges::any_of(frames, [&](const std::string& x) { return ours.count(x) > 0; })) continue;
        shown += static_cast<double>(ns);
        const std::string state = frames.front();
        frames.erase(frames.begin());
        if (frames.back().starts_with("[receive, queue ")) frames.pop_back();
        if (state == "[running]") {
            running += static_cast<double>(ns);
            EXPECT_EQ(frames.size(), 1u) << stack;  // not walked: the function the VM names
        } else {
            EXPECT_TRUE(possible.count(frames)) << "a stack no flipper can have: " << stack;
        }
    }
    std::cout << "[          ] " << vm().name << ": " << shown / 1e9 << " process-seconds of flippers shown ("
              << running / 1e9 << " running), " << stat(r, "changed_while_read").value_or(-1)
              << " processes changed while read and left out\n";
    // 200 flippers for ~3 s.
    EXPECT_GT(shown / 1e9, 200 * 2.5);
}

// A stack 30,000 frames deep (bb_stacks.erl's `deep`), profiled alone (--process): its
// leaf-most frames, under a frame that says the rest was not read, never more than --max-depth.
TEST_P(WallVmTest, DeepStacksAreBounded) {
    ErlVm erl(vm(), "bb_stacks:main()");
    std::istringstream ready(erl.wait_line("ready", 60s));
    std::string word, server, deep;
    ready >> word >> server >> deep;
    ToolResult r = run_tool(kTool,
                            {"-e", "wall", "-d", "1", "--process", deep, "-f", "folded", std::to_string(erl.os_pid())},
                            60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    const auto stacks = parse_folded(r.out);
    ASSERT_EQ(stacks.size(), 1u) << r.out;
    const std::vector<std::string> frames = split_frames(stacks.begin()->first);
    EXPECT_EQ(frames[0], "[waiting]");
    EXPECT_EQ(frames[1], "[truncated: stack deeper than 16384 words]");
    EXPECT_EQ(frames[frames.size() - 2], "bb_stacks:wait_here/0");
    EXPECT_EQ(frames.back(), "[receive, queue 0]");
    EXPECT_EQ(frames.size(), 512u + 4);  // --max-depth 512 Erlang frames, the leaf, 3 of ours
    EXPECT_EQ(stat(r, "truncated").value_or(0), stat(r, "processes_profiled").value_or(-1));
}

// Processes that die while a tick reads them (20 spawned a millisecond, each living 0 to 3 ms):
// a process read is named by the pid its Process holds when read, and a slot that holds another
// process by then, or none, is left out. Every stack of a worker is under the workers' name and
// only theirs, and the other processes' never hold a worker's frames.
TEST_P(WallVmTest, DyingProcessesAreNeverMisattributed) {
    ErlVm erl(vm(), "bb_wall:main(churn)");
    erl.wait_line("ready", 60s);
    ToolResult r = run_tool(kTool,
                            {"-e", "wall", "-d", "3", "--per-tick", "300", "--by-process", "-f", "folded",
                             std::to_string(erl.os_pid())},
                            60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    const std::string worker = "bb_wall:churn_worker/0";
    double workers = 0;
    for (const auto& [stack, ns] : parse_folded(r.out)) {
        const std::vector<std::string> frames = split_frames(stack);
        // A process read as it exits can be shown by its pid alone: its exit state (u.terminate)
        // overwrites its initial call, the two share a union in Process (erl_process.h; seen once
        // in a local CI run on OTP 27: "<0.11351.0>;[exiting];bb_wall:churn_worker/0"). Only the
        // workers exit here, and the pid is the one its Process held when read: a worker.
        const bool exiting_by_pid = frames.size() > 1 && frames[0].starts_with("<") && frames[1] == "[exiting]";
        const bool named_worker = frames[0].starts_with(worker) || exiting_by_pid;
        const bool worker_frames = std::ranges::any_of(frames, [](const std::string& x) {
            return x.starts_with("bb_wall:churn_");
        });
        if (named_worker) {
            workers += static_cast<double>(ns);
            // Its state, then its own frames only: a worker's, the BIFs and library it calls, or
            // the VM's trampoline a process spawned but not yet run resumes in.
            for (size_t i = 2; i < frames.size(); i++)
                EXPECT_TRUE(frames[i].starts_with("bb_wall:churn_") || frames[i].starts_with("[") ||
                            frames[i].starts_with("erlang:") || frames[i].starts_with("rand:") ||
                            frames[i] == "erts_beamasm:run_process/3")
                    << stack;
        } else {
            EXPECT_FALSE(worker_frames) << "a worker's frames under another process: " << stack;
        }
    }
    std::cout << "[          ] " << vm().name << ": " << workers / 1e9 << " process-seconds of workers, "
              << stat(r, "exited_while_read").value_or(-1) << " processes exited while read\n";
    EXPECT_GT(workers, 0);
    EXPECT_GT(stat(r, "exited_while_read").value_or(0), 0);  // the case this test is about happened
}

// A table far larger than a tick reads (+P 4,194,304: 32 MiB of slots): after a first whole
// read, each tick reads at most 2 MiB of it, in turns round the table, and the profile stays
// right (the clients' time in their call, against their share of the processes).
TEST(WallTest, ReadsPerTickAreBounded) {
    ErlVm erl(vm_named("otp29"), "bb_wall:main()", {"+S", "2", "+P", "4194304"});
    std::istringstream ready(erl.wait_line("ready", 60s));
    std::string word, server;
    double processes = 0;
    ready >> word >> server >> processes;
    // -v: the attach line in full says how many slots the table has.
    ToolResult r = run_tool(kTool, {"-e", "wall", "-d", "4", "-v", "-f", "folded", std::to_string(erl.os_pid())}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.err, m, std::regex(R"(of (\d+) process table slots)"))) << r.err;
    const double slots = std::stod(m[1]), ticks = static_cast<double>(stat(r, "ticks").value_or(0));
    const double bytes = static_cast<double>(stat(r, "slot_bytes").value_or(-1));
    EXPECT_GE(slots, 4194304);
    EXPECT_GT(ticks, 40);
    EXPECT_LE(bytes, 8 * slots + (ticks - 1) * 2 * 1024 * 1024) << describe(r);
    double calls = 0, all = 0;
    for (const auto& [stack, ns] : parse_folded(r.out)) {
        all += static_cast<double>(ns);
        if (stack.find(";gen:do_call/4;[waiting for bb_wall_server") != std::string::npos)
            calls += static_cast<double>(ns);
    }
    std::cout << "[          ] " << bytes / ticks / 1e6 << " MB of slots a tick over " << ticks
              << " ticks (a whole read: " << 8 * slots / 1e6 << " MB); clients in their call " << 100 * calls / all
              << "% of process time, " << 100 * 200 / processes << "% of the processes\n";
    EXPECT_NEAR(calls / all, 200 / processes, 0.05);
}

// The table ranks what is not idle: the 50 receivers with an empty queue and the VM's own idle
// servers are the heading's idle figure (the processes that are neither the 200 clients, the 20
// busy loops, the 50 receivers with a queue nor the server, of all), and the first row is the
// clients waiting for the server.
TEST_P(WallVmTest, TheTableRanksWhatIsNotIdle) {
    ErlVm erl(vm(), "bb_wall:main()", {"+S", "2"});
    std::istringstream ready(erl.wait_line("ready", 60s));
    std::string word, server;
    double processes = 0;
    ready >> word >> server >> processes;
    ToolResult r = run_tool(kTool, {"-e", "wall", "-d", "4", std::to_string(erl.os_pid())}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(^([0-9.]+) process-seconds .*; ([0-9.]+) of them idle)")))
        << r.out;
    const double all = std::stod(m[1]), idle = std::stod(m[2]);
    const double want = (processes - 200 - 20 - 50 - 1) / processes;
    std::cout << "[          ] idle " << 100 * idle / all << "% of process time, " << 100 * want
              << "% of the processes idle by construction\n";
    EXPECT_NEAR(idle / all, want, 0.03) << r.out;
    std::vector<std::string> rows;
    bool in_table = false;
    for (const auto& line : lines_of(r.out)) {
        if (line.starts_with("SHARE%")) in_table = true;
        else if (line.starts_with("WAITERS")) in_table = false;  // called processes: their own time, idle too
        else if (in_table) rows.push_back(line);
    }
    ASSERT_FALSE(rows.empty()) << r.out;
    EXPECT_NE(rows.front().find("[waiting for bb_wall_server, pid"), std::string::npos) << r.out;
    for (const auto& row : rows) {
        EXPECT_EQ(row.find("[receive, queue 0]"), std::string::npos) << row;
        EXPECT_EQ(row.find("[hibernated]"), std::string::npos) << row;
    }
}

// The callee of a wait in dets:req/2 (20 clients of one dets table) and in io:execute_request/3
// (10 writers to a slow I/O server) is named from the caller's monitor as gen:do_call/4's is:
// the table's server and the I/O server, by pid, for at least 99% of their waiters' time (a
// wait caught as it ends is "[waiting for ?]": the workload's inserts are long enough, 2,000
// elements, that few are; with 100 elements, 0.4 to 0.7% of the dets clients' time).
TEST_P(WallVmTest, DetsAndIoCallsNameTheirCallee) {
    ErlVm erl(vm(), "bb_wall_calls:main()", {"+S", "2"});
    std::istringstream ready(erl.wait_line("ready", 60s));
    std::string word, dets_server, io_server;
    ready >> word >> dets_server >> io_server;
    auto bare = [](const std::string& pid) { return pid.substr(1, pid.size() - 2); };  // pprof-safe, as shown
    ToolResult r = run_tool(
        kTool, {"-e", "wall", "-d", "3", "--per-tick", "200", "-f", "folded", std::to_string(erl.os_pid())}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    struct Waits {
        std::string leaf, callee;
        double all = 0, named = 0;
    } waits[] = {{";dets:insert/2;dets:req/2;", "pid " + bare(dets_server) + "]"},
                 {";io:format/3;io:execute_request/3;", "pid " + bare(io_server) + "]"}};
    for (const auto& [stack, ns] : parse_folded(r.out)) {
        if (!stack.starts_with("[waiting];")) continue;
        for (Waits& w : waits) {
            const size_t at = stack.rfind(w.leaf);
            // The leaf Erlang frame, then only its pseudo-frame.
            if (at == std::string::npos || stack.find(';', at + w.leaf.size()) != std::string::npos) continue;
            w.all += static_cast<double>(ns);
            if (stack.ends_with(w.callee)) w.named += static_cast<double>(ns);
        }
    }
    for (const Waits& w : waits) {
        std::cout << "[          ] " << w.leaf << ": " << w.all / 1e9 << " process-seconds waiting, "
                  << 100 * w.named / std::max(w.all, 1.0) << "% with " << w.callee << "\n";
        EXPECT_GT(w.all, 1e9) << w.leaf << "\n" << r.out;
        EXPECT_GE(w.named, 0.99 * w.all) << w.leaf << "\n" << r.out;
    }
}

// What -e wall cannot be asked for: one line each, before any VM is read.
TEST(WallErrors, OneLine) {
    ErlVm erl("bb_work:main(idle)");
    erl.wait_line("ready");
    const std::string pid = std::to_string(erl.os_pid());
    const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
        {{"-e", "wall", "--pstack", pid}, "not with -e wall"},
        {{"-e", "wall", "--kernel", pid}, "-e wall reads processes from user space"},
        {{"-e", "wall", "--per-cpu", pid}, "-e wall reads processes from user space"},
        {{"-e", "wall", "--period", "100000", pid}, "-e wall ticks -F times a second"},
        {{"-e", "wall", "-F", "5000", pid}, "-e wall ticks 1 to 1000 times a second"},
        {{"--per-tick", "5", pid}, "--per-tick: only with -e wall"},
        {{"-e", "wall", "--process", "no_such_name_anywhere", pid}, "no_such_name_anywhere"},
    };
    for (const auto& [args, says] : cases) {
        const std::string line = expect_one_line_error(run_tool(kTool, args, 30s), kTool);
        EXPECT_NE(line.find(says), std::string::npos) << line;
    }
    const std::string line = expect_one_line_error(run_tool("beam-bpf-blame",
                                                            {"-e", "wall", "erts_garbage_collect", pid}, 30s),
                                                   "beam-bpf-blame");
    EXPECT_NE(line.find("-e wall is beam-bpf-sample's"), std::string::npos) << line;
}

}  // namespace wall_test
