// The report formats, each read by its real consumer: pprof by the upstream profile.proto and
// `go tool pprof`, the HTML flame graph and speedscope's file in headless Chromium (speedscope
// itself, from npm), Elixir names from a real Elixir program. The checkers live in
// tests/consumers; this file runs the profiler on real VMs and hands them its files.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "harness.hpp"

namespace report_test {

using namespace bbt;

const std::string kTool = "beam-bpf-sample";
const std::string kConsumers = std::string(BB_SOURCE_DIR) + "/tests/consumers/";

std::string pid_arg(const ErlVm& vm) { return std::to_string(vm.os_pid()); }

class ReportTest : public RootTest {
protected:
    std::string prefix = ::testing::TempDir() + "bb_report_" + std::to_string(getpid());
    // Runs a checker; its one line is the result either way.
    void check(const std::vector<std::string>& argv) {
        ToolResult r = run_command(argv, std::chrono::seconds(300));
        std::cout << argv[1].substr(argv[1].rfind('/') + 1) << ": " << r.out << r.err;
        EXPECT_EQ(r.exit_code, 0) << describe(r);
    }
};

// One run, three formats: go tool pprof's flat counts equal the folded stacks' leaf counts and
// its flat% the --flat top table's SELF%, for the same samples.
TEST_F(ReportTest, PprofReadByGoToolPprof) {
    ErlVm vm("bb_work:main(split532)");
    vm.wait_line("ready");
    ToolResult r = run_tool(
        kTool, {"-d", "4", "--format", "top,folded,pprof", "--flat", "-t", "1000", "-o", prefix, pid_arg(vm)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::ifstream top(prefix + ".txt");
    std::stringstream text;
    text << top.rdbuf();
    EXPECT_NE(text.str().find("bb_work:f5/2"), std::string::npos) << text.str();
    check({"/usr/bin/python3", kConsumers + "check_pprof.py", prefix + ".pb.gz", "--folded", prefix + ".folded",
           "--top", prefix + ".txt"});
}

// The built-in flame graph opens offline, draws the frames and finds a function; speedscope
// loads the same run's file.
TEST_F(ReportTest, HtmlAndSpeedscopeInChromium) {
    ErlVm vm("bb_work:main(split532)");
    vm.wait_line("ready");
    ToolResult r = run_tool(kTool, {"-d", "3", "--format", "html,speedscope", "-o", prefix, pid_arg(vm)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    check({"python3", kConsumers + "check_html.py", prefix + ".html", "--expect", "bb_work:f5/2", "--screenshot",
           prefix + ".png"});
    check({"python3", kConsumers + "check_speedscope.py", prefix + ".speedscope.json"});
}

// 3,000 processes of a few samples each, a root each (--by-pid): each too narrow to draw, they
// left half the flame graph blank. They are drawn as one box "other (N)", in Chromium, beside
// a high-priority spinner that takes a scheduler to itself.
TEST_F(ReportTest, HtmlGathersNarrowCalleesIntoOther) {
    ErlVm vm("spawn_opt(bb_work, caller_a, [-1], [{priority, high}]), bb_many:main(3000)");
    vm.wait_line("ready", 60s);
    ToolResult r = run_tool(kTool,
                            {"-d", "3", "--by-pid", "--format", "html", "-o", prefix + "_many.html", pid_arg(vm)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    check({"python3", kConsumers + "check_html.py", prefix + "_many.html", "--expect", "bb_work:spin_a/2",
           "--expect-other"});
}

// A gen_server recursing 3,000 deep: in the flame graph the run is one box
// "bb_work:deep_rec/3 (recursive)" under handle_call/3, not a tower 512 rows tall that pushed
// everything else off the page; the folded output keeps every frame.
TEST_F(ReportTest, HtmlCollapsesRecursion) {
    ErlVm vm("bb_work:main(deep_server, 3000)");
    vm.wait_line("ready", 60s);
    ToolResult r = run_tool(kTool, {"-d", "2", "--format", "html,folded", "-o", prefix + "_deep", pid_arg(vm)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    check({"python3", kConsumers + "check_html.py", prefix + "_deep.html", "--expect", "bb_work:deep_rec/3 (recursive)",
           "--max-depth", "40"});
    size_t longest = 0;
    for (const auto& [stack, n] : parse_folded(read_file(prefix + "_deep.folded")))
        longest = std::max(longest, split_frames(stack).size());
    EXPECT_GT(longest, 500u) << "the folded output should keep the recursion's frames";
}

// Elixir functions as Elixir writes them, and as the VM does with --raw-names.
TEST_F(ReportTest, ElixirNames) {
    std::string dir = ::testing::TempDir() + "bb_elixir_" + std::to_string(getpid());
    std::filesystem::create_directories(dir);
    ToolResult c = run_command({"elixirc", "-o", dir, std::string(BB_WORKLOAD_DIR) + "/bb_elixir.ex"});
    ASSERT_EQ(c.exit_code, 0) << describe(c);
    ErlVm vm("'Elixir.BbElixir':main()", {"-pa", "/usr/lib/elixir/lib/elixir/ebin", "-pa", dir});
    vm.wait_line("ready");
    ToolResult r = run_tool(kTool, {"-d", "2", "--folded", "--only-erlang", pid_arg(vm)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    auto stacks = parse_folded(r.out);
    long exact = 0, all = 0;
    for (const auto& [stack, count] : stacks) {
        all += count;
        if (stack == "BbElixir.loop/1;BbElixir.spin/2") exact += count;  // inner/1 tail-calls spin/2
        EXPECT_EQ(stack.find("'Elixir."), std::string::npos) << "an atom name left: " << stack;
    }
    ASSERT_GT(all, 500) << r.out;
    EXPECT_GE(exact, all * 9 / 10) << r.out;
    ToolResult raw = run_tool(kTool, {"-d", "1", "--folded", "--only-erlang", "--raw-names", pid_arg(vm)}, 60s);
    ASSERT_EQ(raw.exit_code, 0) << describe(raw);
    EXPECT_NE(raw.out.find("'Elixir.BbElixir':spin/2"), std::string::npos) << raw.out;
}

// Continuous profiling: one valid pprof file per interval, named by its start time, whose
// counts add up to every sample of the run.
TEST_F(ReportTest, EveryWritesOneProfilePerInterval) {
    ErlVm vm("bb_work:main(split532)");
    vm.wait_line("ready");
    std::string dir = prefix + "_every";
    std::filesystem::create_directories(dir);
    std::string stats = dir + "/stats.json";
    ToolResult r = run_tool(kTool,
                            {"-d", "10", "--every", "2", "--format", "pprof", "-o", dir + "/prof-%t.pb.gz", "--stats",
                             stats, pid_arg(vm)},
                            60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::vector<std::string> files;
    for (const auto& e : std::filesystem::directory_iterator(dir))
        if (e.path().string().ends_with(".pb.gz")) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    ASSERT_EQ(files.size(), 5u) << describe(r);
    long sum = 0;
    for (const auto& f : files) {
        EXPECT_TRUE(std::regex_search(f, std::regex("/prof-20[0-9]{6}T[0-9]{6}Z\\.pb\\.gz$"))) << f;
        ToolResult c = run_command({"/usr/bin/python3", kConsumers + "check_pprof.py", f});
        EXPECT_EQ(c.exit_code, 0) << describe(c);
        std::smatch m;
        if (std::regex_search(c.out, m, std::regex("^ok: ([0-9]+) samples"))) sum += std::stol(m[1]);
    }
    std::ifstream in(stats);
    std::stringstream text;
    text << in.rdbuf();
    const std::string json = text.str();
    std::smatch m;
    ASSERT_TRUE(std::regex_search(json, m, std::regex("\"records\": ([0-9]+)"))) << json;
    EXPECT_EQ(sum, std::stol(m[1])) << "the files' samples do not add up to the run's records";
    EXPECT_GT(sum, 5000);
}

TEST_F(ReportTest, FormatErrorsAreOneLine) {
    ErlVm vm("bb_work:main(split532)");
    vm.wait_line("ready");
    const std::pair<std::vector<std::string>, std::string> cases[] = {
        {{"--format", "svg"}, "--format svg: the formats are top, folded, pprof, speedscope, html"},
        {{"--format", "html,pprof"}, "several formats need -o PREFIX"},
        {{"--format", "top,top", "-o", prefix}, "--format top,top: top twice"},
        {{"--folded", "--format", "html"}, "--folded and --format html: choose one"},
        {{"--every", "2", "-o", prefix}, "--every needs -o with %t in it"},
        {{"--every", "0.1", "-o", prefix + "%t"}, "--every 0.1: at least 1 second"}};
    for (const auto& [args, says] : cases) {
        std::vector<std::string> a = args;
        a.push_back(pid_arg(vm));
        std::string line = expect_one_line_error(run_tool(kTool, a, 30s), kTool);
        EXPECT_NE(line.find(says), std::string::npos) << line;
    }
}

// Per-process views, on every test VM: four processes run the same code under a registered
// name (two), a process label, and proc_lib's initial call. --by-process must tell them apart,
// each under its own root frame, with the shares of CPU the VM's own trace of their scheduling
// gives for the same interval; pprof carries the same names as each sample's `process` label
// (read by go tool pprof); --process takes a registered name.
class ProcessReportTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, ProcessReportTest, ::testing::ValuesIn(release_vms()), test_vm_name);

TEST_P(ProcessReportTest, ByProcessMatchesTheVmsTrace) {
    ErlVm erl(vm(), "bb_work:main(named)", {"+S", "2"});
    std::istringstream ready(erl.wait_line("ready"));
    std::string word, pids[4];
    ready >> word >> pids[0] >> pids[1] >> pids[2] >> pids[3];
    ASSERT_TRUE(pids[3].starts_with("<")) << erl.output();
    const std::string names[4] = {"bb_alpha", "bb_beta", "{bb_gamma,3}", "bb_work:named_root/3"};

    std::string prefix = ::testing::TempDir() + "bb_by_process_" + std::to_string(getpid());
    RunningTool t = start_tool(kTool, {"--by-pid", "--format", "folded,pprof", "-o", prefix, pid_arg(erl)});
    std::string err;
    ASSERT_TRUE(wait_stderr(t, "attached", 30s, &err)) << err;
    erl.send_line("runtime_start");
    std::this_thread::sleep_for(5s);
    erl.send_line("runtime_stop");
    std::istringstream runtime(erl.wait_line("runtime"));
    ToolResult r = finish_tool(t, true);
    ASSERT_EQ(r.exit_code, 0) << describe(r);

    std::map<std::string, double> traced_us;  // pid -> time on a scheduler
    std::string pid;
    double us;
    runtime >> word;
    while (runtime >> pid >> us) traced_us[pid] = us;
    std::ifstream folded(prefix + ".folded");
    std::stringstream text;
    text << folded.rdbuf();
    std::map<std::string, long> under;  // root frame -> samples in named_spin/3 under it
    for (const auto& [stack, count] : parse_folded(text.str())) {
        auto frames = split_frames(stack);
        if (std::find(frames.begin(), frames.end(), "bb_work:named_spin/3") != frames.end()) under[frames[0]] += count;
    }
    double traced_all = 0;
    long sampled_all = 0;
    for (int i = 0; i < 4; i++) {
        traced_all += traced_us[pids[i]];
        sampled_all += under[names[i] + " " + pids[i]];
    }
    ASSERT_GT(sampled_all, 3000) << text.str();
    long other = 0;
    for (const auto& [root, count] : under) other += count;
    EXPECT_EQ(other, sampled_all) << "named_spin/3 under roots other than the four processes:\n" << text.str();
    for (int i = 0; i < 4; i++) {
        double sampled = 100.0 * under[names[i] + " " + pids[i]] / sampled_all;
        double traced = 100.0 * traced_us[pids[i]] / traced_all;
        std::cout << names[i] << " " << pids[i] << ": " << sampled << "% of the samples, " << traced
                  << "% of the traced time\n";
        EXPECT_NEAR(sampled, traced, 3.0) << names[i];
    }

    ToolResult tags = run_command({"go", "tool", "pprof", "-tags", prefix + ".pb.gz"});
    ASSERT_EQ(tags.exit_code, 0) << describe(tags);
    for (const auto& n : names) EXPECT_NE(tags.out.find(": " + n + "\n"), std::string::npos) << n << "\n" << tags.out;

    ToolResult only = run_tool(kTool, {"-d", "2", "--folded", "--process", "bb_beta", pid_arg(erl)}, 60s);
    ASSERT_EQ(only.exit_code, 0) << describe(only);
    EXPECT_NE(only.err.find("--process bb_beta is " + pids[1]), std::string::npos) << only.err;
    long beta = 0;
    for (const auto& [stack, count] : parse_folded(only.out)) beta += count;
    EXPECT_GT(beta, 200) << only.out;
    std::string line = expect_one_line_error(run_tool(kTool, {"--process", "bb_nobody", pid_arg(erl)}, 30s), kTool);
    EXPECT_NE(line.find("no process is registered under that name"), std::string::npos) << line;
}

// --by-process groups processes by name: 190 spinners of one initial call are one root that
// says how many they were, the 10 registered ones a root each; the top table lists them. A
// process's samples are its own whichever way (--by-pid: 200 roots).
TEST_F(ReportTest, ByProcessGroupsByName) {
    ErlVm erl("bb_many:main(200)");
    erl.wait_line("ready");
    const std::string prefix = ::testing::TempDir() + "bb_grouped_" + std::to_string(getpid());
    ToolResult r = run_tool(kTool, {"-d", "3", "--by-process", "--format", "top,folded", "-o", prefix, pid_arg(erl)},
                            60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::map<std::string, long> roots;
    for (const auto& [stack, count] : parse_folded(read_file(prefix + ".folded")))
        roots[split_frames(stack)[0]] += count;
    long pool = roots["bb_many:spin/1 (190 processes)"], all = 0, registered = 0;
    for (const auto& [root, n] : roots) {
        all += n;
        if (root.starts_with("bb_many_")) registered += n;
    }
    std::cout << roots.size() << " roots; the pool " << pool << " of " << all << " samples, the 10 registered "
              << registered << "\n";
    EXPECT_LE(roots.size(), 20u) << "not grouped: " << roots.size() << " roots";
    EXPECT_GT(pool, all * 80 / 100);  // 190 of 200 equal spinners
    EXPECT_GT(registered, 0);
    const std::string top = read_file(prefix + ".txt");
    EXPECT_NE(top.find("PROCESSES"), std::string::npos) << top;
    EXPECT_NE(top.find("bb_many:spin/1 (190 processes)"), std::string::npos) << top;
    ToolResult per_pid = run_tool(kTool, {"-d", "2", "--by-pid", "--folded", pid_arg(erl)}, 60s);
    ASSERT_EQ(per_pid.exit_code, 0) << describe(per_pid);
    std::set<std::string> pid_roots;
    for (const auto& [stack, count] : parse_folded(per_pid.out)) pid_roots.insert(split_frames(stack)[0]);
    EXPECT_GT(pid_roots.size(), 100u) << "--by-pid: a root per process";
}

// Processes named the way RabbitMQ names its queues (process_name in their dictionary, as
// rabbit_misc puts it) are named so, as the VM prints the term, not by their initial call; those
// of one kind (the tuple's first element) are under one root that counts them, each one's name
// a frame below it.
TEST_F(ReportTest, RabbitMqProcessNameInTheDictionary) {
    ErlVm erl(
        "[spawn(fun() -> put(process_name, {rabbit_amqqueue_process, {resource, <<\"/\">>, queue, Q}}), "
        "bb_many:spin(1) end) || Q <- [<<\"orders\">>, <<\"invoices\">>, <<\"users\">>]], "
        "io:format(\"ready~n\"), receive stop -> ok end");
    erl.wait_line("ready");
    ToolResult r = run_tool(kTool, {"-d", "2", "--by-process", "--folded", pid_arg(erl)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    long kind = 0, all = 0;
    std::map<std::string, long> queues;
    for (const auto& [stack, count] : parse_folded(r.out)) {
        all += count;
        auto frames = split_frames(stack);
        if (frames[0] != "{rabbit_amqqueue_process,...} (3 processes)") continue;
        kind += count;
        ASSERT_GE(frames.size(), 2u) << stack;
        queues[frames[1]] += count;
    }
    EXPECT_GT(kind, all / 2) << r.out;
    for (const char* q : {"orders", "invoices", "users"}) {
        const std::string name = std::string("{rabbit_amqqueue_process,{resource,<<\"/\">>,queue,<<\"") + q + "\">>}}";
        EXPECT_GT(queues[name], kind / 10) << name << " under its kind's root:\n" << r.out;
    }
    EXPECT_EQ(queues.size(), 3u) << r.out;
}

}  // namespace report_test
