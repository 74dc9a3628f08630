// beam-bpf-blame against real VMs: the alloc_arith workload in tests/workloads/bb_work.erl (one
// process allocating, one doing allocation-free arithmetic) and the exact-count workload in
// tests/workloads/bb_gc.erl, whose oracle is the VM's own garbage_collection trace. These tests
// load BPF: they need root and never skip.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "harness.hpp"

namespace blame_test {

using namespace bbt;

const std::string kTool = "beam-bpf-blame";
const std::string kGc = "erts_garbage_collect";

std::string pid_arg(const ErlVm& vm) { return std::to_string(vm.os_pid()); }

std::vector<std::string> words_of(const std::string& line) {
    std::vector<std::string> words;
    std::istringstream in(line);
    for (std::string w; in >> w;) words.push_back(w);
    return words;
}

// The symbols of -v's `beam-bpf-blame: watching A, B, C (FILE)` line; fails if there is none.
std::vector<std::string> watched(const ToolResult& r) {
    static const std::regex re(R"(^beam-bpf-blame: watching (.+) \(([^()]+)\)$)");
    for (const auto& line : lines_of(r.err)) {
        std::smatch m;
        if (!std::regex_match(line, m, re)) continue;
        std::vector<std::string> names;
        std::string list = m[1];
        for (size_t start = 0;;) {
            size_t comma = list.find(", ", start);
            names.push_back(list.substr(start, comma - start));
            if (comma == std::string::npos) break;
            start = comma + 2;
        }
        return names;
    }
    ADD_FAILURE() << "no 'beam-bpf-blame: watching ...' line\n" << describe(r);
    return {};
}

struct TopRow {
    double self, total;
    std::string function;
};

// Table output: a `N samples of FUNCS; ...` line, the `SELF% TOTAL% FUNCTION` header, rows.
std::vector<TopRow> parse_table(const std::string& out) {
    auto lines = lines_of(out);
    auto header = std::find_if(lines.begin(), lines.end(), [](const std::string& l) {
        return l.find("SELF%") != std::string::npos && l.find("TOTAL%") != std::string::npos &&
               l.find("FUNCTION") != std::string::npos;
    });
    std::vector<TopRow> rows;
    if (header == lines.end()) {
        ADD_FAILURE() << "no table header in:\n" << out;
        return rows;
    }
    for (auto it = header + 1; it != lines.end(); ++it) {
        std::istringstream in(*it);
        TopRow row;
        if (!(in >> row.self >> row.total >> row.function)) {
            ADD_FAILURE() << "malformed row: '" << *it << "'";
            continue;
        }
        rows.push_back(row);
    }
    return rows;
}

// Error contract: non-zero exit, exactly one stderr line, with the prefix and `needle`.
void expect_error(const ToolResult& r, const std::string& needle) {
    std::string line = expect_one_line_error(r, kTool);
    EXPECT_NE(line.find(needle), std::string::npos) << "expected '" << needle << "' in: " << line;
}

class BlameTest : public RootTest {};
// Run on the VMs of harness.hpp's probe_vms(): every release and form whose functions are named.
class BlameVmTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, BlameVmTest, ::testing::ValuesIn(probe_vms()), test_vm_name);

// --- alloc_arith -------------------------------------------------------------------------

const std::string kAllocFns[] = {"bb_work:alloc_loop/0", "bb_work:build/2"};
const std::string kArithFns[] = {"bb_work:arith_loop/0", "bb_work:arith/2"};

// Who triggers GC: the allocating process's functions, never the arithmetic one's, although
// both run all the time (checked with beam-bpf-sample, so "absent" is not "never ran").
TEST_P(BlameVmTest, BlameRanksAllocatorFirst) {
    ErlVm vm(this->vm(), "bb_work:main(alloc_arith)");
    vm.wait_line("ready");
    // The VM's own start (code_server, application_controller) collects for a moment after
    // `ready`: a CI run caught its collections, and one of the arithmetic process, in the window.
    std::this_thread::sleep_for(1s);

    ToolResult r = run_tool(kTool, {"-v", "-d", "5", kGc, pid_arg(vm)}, 60s);
    std::cout << r.out;
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    const long samples = stat(r, "records").value_or(-1);
    std::cout << "erts_garbage_collect* in " << samples << " samples\n";
    ASSERT_GE(samples, 50) << "too few GC samples for a ranking\n" << describe(r);
    // The prefix matches several functions: the table starts with the samples each was in, of
    // the watched ones, adding up to the run's (the unwound frames say which, on every sample).
    const auto names = watched(r);
    ASSERT_GT(names.size(), 1u) << describe(r);
    long split = 0;
    bool in_split = false;
    for (const auto& line : lines_of(r.out)) {
        if (line.find(" samples in " + std::to_string(names.size()) + " functions:") != std::string::npos)
            in_split = true;
        else if (line.starts_with("Erlang functions on those stacks")) in_split = false;
        else if (in_split && !line.ends_with("FUNCTION")) {
            std::istringstream in(line);
            long n = 0;
            std::string fn;
            ASSERT_TRUE(in >> n >> fn) << line;
            EXPECT_TRUE(std::count(names.begin(), names.end(), fn)) << fn << " is not a watched function\n" << r.out;
            split += n;
        }
    }
    EXPECT_EQ(split, samples) << "the per-function split does not add up to the run\n" << r.out;

    auto rows = parse_table(r.out);
    ASSERT_FALSE(rows.empty()) << describe(r);
    auto top = std::max_element(rows.begin(), rows.end(), [](auto& a, auto& b) { return a.total < b.total; });
    EXPECT_EQ(rows[0].function, top->function) << "rows not ordered by TOTAL%\n" << r.out;
    EXPECT_TRUE(std::count(std::begin(kAllocFns), std::end(kAllocFns), rows[0].function))
        << "top row is not an allocating function\n"
        << r.out;
    EXPECT_GE(rows[0].total, 50.0) << r.out;
    // The arithmetic process allocates nothing, but the VM may still collect it for its own
    // reasons (the literals of purged code are collected from every process that holds them): a
    // sample or two, never a share.
    for (const auto& fn : kArithFns) {
        auto row = std::find_if(rows.begin(), rows.end(), [&](const TopRow& x) { return x.function == fn; });
        EXPECT_TRUE(row == rows.end() || row->total <= 0.5) << fn << " blamed for GC\n" << r.out;
        EXPECT_EQ(r.err.find(fn), std::string::npos) << fn << " in stderr\n" << r.err;
    }

    // About 130 samples a second: 2 s is ten times what "at least half" needs to be sure of.
    ToolResult f = run_tool(kTool, {"-d", "2", "--folded", kGc, pid_arg(vm)}, 60s);
    ASSERT_EQ(f.exit_code, 0) << describe(f);
    auto stacks = parse_folded(f.out);
    long in_alloc = 0, all = 0;
    for (const auto& [stack, count] : stacks) {
        all += count;
        auto frames = split_frames(stack);
        if (std::find(frames.begin(), frames.end(), kAllocFns[0]) != frames.end()) in_alloc += count;
        for (const auto& fn : kArithFns)
            EXPECT_EQ(std::count(frames.begin(), frames.end(), fn), 0)
                << fn << " in folded stack: " << stack << " " << count;
    }
    std::cout << "--folded: " << all << " samples, " << in_alloc << " under " << kAllocFns[0] << "\n";
    EXPECT_GE(in_alloc, all / 2) << f.out;

    // The arithmetic process did run meanwhile: its absence above is the tool's doing.
    ToolResult s = run_tool("beam-bpf-sample", {"-d", "1", "--folded", pid_arg(vm)}, 60s);
    ASSERT_EQ(s.exit_code, 0) << describe(s);
    long arith = 0, sampled = 0;
    for (const auto& [stack, count] : parse_folded(s.out)) {
        sampled += count;
        if (stack.find(kArithFns[1]) != std::string::npos) arith += count;
    }
    std::cout << "beam-bpf-sample: " << arith << " of " << sampled << " samples in " << kArithFns[1] << "\n";
    EXPECT_GE(arith, sampled / 5) << describe(s);
}

// --- matching ----------------------------------------------------------------------------

TEST_F(BlameTest, BlamePrintsMatchedSymbols) {
    ErlVm vm("bb_work:main(idle)");
    vm.wait_line("ready");

    ToolResult r = run_tool(kTool, {"-v", "-d", "1", kGc, pid_arg(vm)}, 30s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    auto names = watched(r);
    std::cout << "prefix " << kGc << " matched:";
    for (const auto& n : names) std::cout << " " << n;
    std::cout << "\n";
    for (const auto& want : {kGc, kGc + "_nobump"})
        EXPECT_TRUE(std::count(names.begin(), names.end(), want)) << want << " not matched\n" << describe(r);
    for (const auto& n : names) EXPECT_TRUE(n.starts_with(kGc)) << n << " is no prefix match";
    // Without -v the line fits ~120 columns: the first names, and how many more.
    ToolResult brief = run_tool(kTool, {"-d", "1", kGc, pid_arg(vm)}, 30s);
    ASSERT_EQ(brief.exit_code, 0) << describe(brief);
    const std::string more = " and " + std::to_string(names.size() - 2) + " more (-v lists them)";
    EXPECT_NE(brief.err.find("beam-bpf-blame: watching " + names[0] + ", " + names[1] + more + "\n"), std::string::npos)
        << describe(brief);
    for (const auto& line : lines_of(brief.err)) EXPECT_LE(line.size(), 120u) << line;

    ToolResult e = run_tool(kTool, {"-v", "-d", "1", "--exact", kGc, pid_arg(vm)}, 30s);
    ASSERT_EQ(e.exit_code, 0) << describe(e);
    EXPECT_EQ(watched(e), std::vector<std::string>{kGc}) << describe(e);

    // A comma list: each name matched as alone (GC after a BIF has an entry of its own), a
    // function two of them match watched once; an empty name is an error.
    ToolResult both = run_tool(kTool,
                               {"-v", "-d", "1", "--exact", kGc + ",erts_gc_after_bif_call_lhf," + kGc, pid_arg(vm)},
                               30s);
    ASSERT_EQ(both.exit_code, 0) << describe(both);
    EXPECT_EQ(watched(both), (std::vector<std::string>{kGc, "erts_gc_after_bif_call_lhf"})) << describe(both);
    expect_error(run_tool(kTool, {"-d", "1", kGc + ",", pid_arg(vm)}, 30s), "an empty function name");

    // The README's GC advice as one command, on a VM that collects both ways: from JIT code
    // (alloc_arith's allocating loop) and after a BIF (binary_to_list/1's list, built by C code).
    // The table starts with the samples each was in, adding up to the run's.
    ErlVm gc(
        "spawn(fun() -> B = binary:copy(<<1>>, 500), (fun F() -> length(binary_to_list(B)), F() end)() end), "
        "bb_work:main(alloc_arith)");
    gc.wait_line("ready");
    const std::vector<std::string> fns = {kGc + "_nobump", "erts_gc_after_bif_call_lhf"};
    ToolResult g = run_tool(kTool, {"-d", "2", "--exact", fns[0] + "," + fns[1], pid_arg(gc)}, 30s);
    ASSERT_EQ(g.exit_code, 0) << describe(g);
    std::map<std::string, long> in;
    for (const auto& line : lines_of(g.out)) {
        std::istringstream words(line);
        long n = 0;
        std::string fn, rest;
        if (words >> n >> fn && !(words >> rest) && std::count(fns.begin(), fns.end(), fn)) in[fn] = n;
    }
    std::cout << fns[0] << " " << in[fns[0]] << " samples, " << fns[1] << " " << in[fns[1]] << "\n";
    EXPECT_NE(g.out.find(" samples in 2 functions:"), std::string::npos) << g.out;
    for (const auto& fn : fns) EXPECT_GT(in[fn], 0) << fn << " has no samples of its own\n" << g.out;
    EXPECT_EQ(in[fns[0]] + in[fns[1]], stat(g, "records").value_or(-1)) << g.out;
}

// --- exact count against the VM's GC trace -----------------------------------------------

TEST_P(BlameVmTest, CountMatchesVmGcTrace) {
    ErlVm vm(this->vm(), "bb_gc:main()");
    auto ready = words_of(vm.wait_line("ready"));
    ASSERT_EQ(ready.size(), 2u) << vm.output();
    const std::string worker = ready[1];

    RunningTool t = start_tool(kTool, {"--count", "--process", worker, kGc, pid_arg(vm)});
    std::string err;
    ASSERT_TRUE(wait_stderr(t, ": attached to ", 30s, &err)) << err;
    vm.send_line("go");
    // gc_count N minor Mi major Ma minor_then_major A
    auto w = words_of(vm.wait_line("gc_count", 30s));
    ToolResult r = finish_tool(t, true, 15s);
    ASSERT_EQ(w.size(), 8u) << vm.output();
    const long trace_n = std::stol(w[1]), fallback = std::stol(w[7]);
    const long calls = stat(r, "records").value_or(-1);
    std::cout << "VM garbage_collection trace for " << worker << ": " << trace_n << " collections (minor " << w[3]
              << ", major " << w[5] << ", minor-then-major " << fallback << "); beam-bpf-blame --count: " << calls
              << " calls\n"
              << r.out;

    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_GT(trace_n, 100) << vm.output();
    // A minor collection that falls back to a major one is two trace starts from one call
    // (see bb_gc.erl); the workload is shaped so that it does not happen in the window.
    EXPECT_EQ(fallback, 0) << "workload precondition broken: " << vm.output();
    EXPECT_EQ(calls, trace_n) << describe(r);
    // Every call comes from the worker's list building.
    auto rows = parse_table(r.out);
    auto build = std::find_if(rows.begin(), rows.end(), [](auto& row) { return row.function == "bb_gc:build/2"; });
    ASSERT_NE(build, rows.end()) << describe(r);
    EXPECT_NEAR(build->total, 100.0, 0.05) << describe(r);
}

// --- zero --------------------------------------------------------------------------------

// erts_garbage_collect_literals runs only when code with literals is purged: never in this
// VM, although it collects garbage all the time (the other erts_garbage_collect* do run).
TEST_F(BlameTest, NeverCalledFunctionReportsZero) {
    const std::string fn = kGc + "_literals";
    ErlVm vm("bb_work:main(alloc_arith)");
    vm.wait_line("ready");
    for (bool count : {false, true}) {
        std::vector<std::string> args{"-v", "-d", "2", "--exact", fn, pid_arg(vm)};
        if (count) args.insert(args.begin(), "--count");
        const std::string unit = count ? "calls" : "samples";
        ToolResult r = run_tool(kTool, args, 30s);
        std::cout << r.err;
        ASSERT_EQ(r.exit_code, 0) << describe(r);
        EXPECT_EQ(watched(r), std::vector<std::string>{fn}) << describe(r);
        EXPECT_EQ(stat(r, "records").value_or(-1), 0) << describe(r);
        EXPECT_TRUE(std::regex_search(r.err, std::regex("beam-bpf-blame: 0 " + unit + ": " + fn + " did not run")))
            << "stderr does not say it did not run\n"
            << describe(r);
        EXPECT_EQ(r.out.find("bb_work:"), std::string::npos) << describe(r);
    }
}

// --- errors ------------------------------------------------------------------------------

TEST_F(BlameTest, UnknownFunctionErrors) {
    ErlVm vm("bb_work:main(idle)");
    vm.wait_line("ready");
    ToolResult r = run_tool(kTool, {"erts_garbage_colect", pid_arg(vm)}, 30s);
    expect_error(r, "erts_garbage_colect");
    // The suggestions: after "closest:", comma-separated; the real name must be among them.
    const std::string line = lines_of(r.err).empty() ? "" : lines_of(r.err)[0];
    const size_t at = line.find("closest:");
    ASSERT_NE(at, std::string::npos) << line;
    std::vector<std::string> closest;
    for (auto& w : words_of(line.substr(at + 8))) {
        if (w.ends_with(",")) w.pop_back();
        closest.push_back(w);
    }
    EXPECT_TRUE(std::count(closest.begin(), closest.end(), kGc)) << line;
    std::cout << "the unknown name was answered in " << r.seconds << " s\n";
}

TEST_F(BlameTest, BlameErrorDeadPid) {
    ToolResult r = run_tool(kTool, {"-d", "1", kGc, std::to_string(dead_pid())}, 30s);
    expect_error(r, "no such process");
}

TEST_F(BlameTest, BlameErrorNotABeam) {
    ChildProcess sleeper({"sleep", "60"});
    ToolResult r = run_tool(kTool, {"-d", "1", kGc, std::to_string(sleeper.pid())}, 30s);
    expect_error(r, "not a BEAM VM");
}

}  // namespace blame_test
