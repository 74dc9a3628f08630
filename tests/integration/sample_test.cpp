// beam-bpf-sample against real VMs running the workloads in tests/workloads/bb_work.erl. The
// workloads' shapes are known by construction (see the comments there), so each test compares
// the tool's output with that shape. These tests load BPF: they need root and never skip.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <iomanip>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness.hpp"

namespace sample_test {

using namespace bbt;
using Clock = std::chrono::steady_clock;

const std::string kTool = "beam-bpf-sample";

std::string pid_arg(const ErlVm& vm) { return std::to_string(vm.os_pid()); }

std::string workload(const std::string& name) { return "bb_work:main(" + name + ")"; }
std::string workload(const std::string& name, long arg) {
    return "bb_work:main(" + name + ", " + std::to_string(arg) + ")";
}

long total(const std::map<std::string, long>& stacks) {
    long n = 0;
    for (const auto& [stack, count] : stacks) n += count;
    return n;
}

double pct(long part, long whole) { return whole ? 100.0 * double(part) / double(whole) : 0; }

bool any_frame_contains(const std::map<std::string, long>& stacks, const std::string& needle) {
    return std::any_of(stacks.begin(), stacks.end(),
                       [&](const auto& s) { return s.first.find(needle) != std::string::npos; });
}

// "a ... z (N frames)" for a stack, and the most common such shapes among stacks that fail
// `ok`: readable failure messages for stacks hundreds of frames deep.
std::string shape(const std::vector<std::string>& f) {
    return f.front() + (f.size() > 2 ? " ... " : " ") + (f.size() > 1 ? f.back() : "") + " (" +
           std::to_string(f.size()) + " frames)";
}

template <class Pred>
std::string odd_shapes(const std::map<std::string, long>& stacks, Pred ok) {
    std::map<std::string, long> by_shape;
    for (const auto& [stack, count] : stacks)
        if (auto f = split_frames(stack); !ok(f)) by_shape[shape(f)] += count;
    std::vector<std::pair<long, std::string>> v;
    for (auto& [sh, n] : by_shape) v.push_back({n, sh});
    std::sort(v.rbegin(), v.rend());
    std::string s;
    for (size_t i = 0; i < v.size() && i < 8; ++i)
        s += "  " + std::to_string(v[i].first) + " samples: " + v[i].second + "\n";
    return s.empty() ? "  (none)\n" : s;
}

// A sample of a process in GC or exiting, whose stack is not walked, is the documented stand-in
// alone: [gc] or [exiting].
void expect_only_erlang(const std::map<std::string, long>& stacks) {
    static const std::regex mfa(R"(^[^:;\s]+:[^;\s]+/\d+$)");
    long bad = 0;
    auto all_erlang = [&](const std::vector<std::string>& f) {
        if (f.size() == 1 && (f[0] == "[gc]" || f[0] == "[exiting]")) return true;
        return std::all_of(f.begin(), f.end(), [&](const std::string& fr) { return std::regex_match(fr, mfa); });
    };
    for (const auto& [stack, count] : stacks)
        if (!all_erlang(split_frames(stack))) bad += count;
    EXPECT_EQ(bad, 0) << "non-Erlang frames in --only-erlang output:\n" << odd_shapes(stacks, all_erlang);
}

// The summary line a user reads carries the four counters, and --stats has each of them. Every
// line of a run without -v fits a terminal of 120 columns.
void expect_summary(const ToolResult& r) {
    for (const std::string& line : lines_of(r.err)) EXPECT_LE(line.size(), 120u) << line;
    EXPECT_TRUE(std::regex_search(r.err, std::regex("beam-bpf-\\w+: \\d+ samples in [0-9.]+ s, \\d+ dropped, \\d+ "
                                                    "truncated, \\d+ unsymbolized frames")))
        << describe(r);
    for (const char* key : {"records", "dropped", "truncated", "unsymbolized_frames"})
        EXPECT_TRUE(stat(r, key)) << "--stats lacks '" << key << "'\n" << describe(r);
}

// Error contract: non-zero exit, exactly one stderr line, with the prefix and one of `needles`.
void expect_error(const ToolResult& r, const std::vector<std::string>& needles) {
    std::string line = expect_one_line_error(r, kTool);
    EXPECT_TRUE(std::any_of(needles.begin(), needles.end(), [&](auto& n) { return line.find(n) != std::string::npos; }))
        << "error line names none of the expected causes: " << line;
}

class SampleTest : public RootTest {};
// The walk's long statistical runs: on layout_vms() (harness.hpp), each release, frame layout,
// lock counting and both forms of 29 at least once.
class SampleVmTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, SampleVmTest, ::testing::ValuesIn(layout_vms()), test_vm_name);
// Checks of what the tool does around the walk (which threads it samples, what it makes of a
// scheduler's stale current process, a VM that dies): the same on a build with frame pointers or
// lock counting as without, so one VM per release (release_vms(): OTP 25, 27, 29) is enough.
class SampleReleaseTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, SampleReleaseTest, ::testing::ValuesIn(release_vms()), test_vm_name);

// --- split532 ----------------------------------------------------------------------------

const std::string kLeaves[3] = {"bb_work:f5/2", "bb_work:f3/2", "bb_work:f2/2"};
const double kExpectedShare[3] = {50, 30, 20};
const std::string kChain = "bb_work:root/0;bb_work:chain1/0;bb_work:chain2/0;";

// --only-erlang, so a sample that landed in C code under fN (a reschedule, say) still counts
// for fN and must still show exactly the Erlang chain: no native frames to account for.
// On a VM with frame pointers (+JPperf true) the JIT maps its code differently (anonymous rwx
// memory, no memfd) and links its Erlang frames through rbp: the walker must follow that chain,
// and the stacks must be as exact as on a stock VM.
TEST_P(SampleVmTest, Split532Shares) {
    ErlVm erl(vm(), workload("split532"));
    erl.wait_line("ready");
    std::cout << erl.output();  // the calibrated iteration counts

    std::string stats = ::testing::TempDir() + "bb_split_stats.json";
    ToolResult r = run_tool(kTool, {"-d", "8", "--folded", "--only-erlang", "--stats", stats, pid_arg(erl)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    expect_summary(r);
    auto stacks = parse_folded(r.out);

    long in_leaf[3] = {}, exact = 0, all = 0;
    for (const auto& [stack, count] : stacks) {
        auto frames = split_frames(stack);
        for (int i = 0; i < 3; ++i) {
            if (std::find(frames.begin(), frames.end(), kLeaves[i]) == frames.end()) continue;
            in_leaf[i] += count;
            all += count;
            if (stack == kChain + kLeaves[i]) exact += count;
        }
    }
    std::ifstream in(stats);
    auto j = nlohmann::json::parse(in);
    long records = j.at("records"), fp_walked = j.at("fp_walked");
    // Each step of attaching, in the order they ran: the VM's checks first, the walker loaded,
    // then the dictionary keys (before the first drain).
    std::vector<std::string> steps;
    for (const auto& step : j.at("attach_ms")) {
        steps.push_back(step.at(0).get<std::string>());
        EXPECT_GE(step.at(1).get<double>(), 0.0) << step;
    }
    ASSERT_GE(steps.size(), 6u) << j.at("attach_ms");
    EXPECT_EQ(steps.front(), "executable");
    EXPECT_EQ(steps[steps.size() - 2], "BPF load and attach") << j.at("attach_ms");
    EXPECT_EQ(steps.back(), "dictionary keys");
    std::cout << std::fixed << std::setprecision(2) << "split532 on " << vm().name << ": " << all << " of "
              << total(stacks) << " samples in f5/f3/f2: f5 " << pct(in_leaf[0], all) << "%, f3 "
              << pct(in_leaf[1], all) << "%, f2 " << pct(in_leaf[2], all) << "%; exact chain in " << pct(exact, all)
              << "%; " << fp_walked << " of " << records << " stacks through the frame-pointer chain\n";

    // 8 s at 999 Hz is ~8000 samples; far fewer would make the 2-point bound meaningless.
    ASSERT_GE(all, 4000) << describe(r);
    for (int i = 0; i < 3; ++i) EXPECT_NEAR(pct(in_leaf[i], all), kExpectedShare[i], 2.0) << kLeaves[i];
    EXPECT_GE(pct(exact, all), 99.0) << "stacks other than " << kChain << "fN:\n" << r.out;
    EXPECT_EQ(stat(r, "truncated").value_or(-1), 0) << describe(r);
    if (vm().frame_pointers) {
        // Samples in C code (reschedules) read c_p->stop and scan instead; they are few.
        EXPECT_GE(pct(fp_walked, records), 80.0) << describe(r);
    } else {
        EXPECT_EQ(fp_walked, 0) << describe(r);
    }
}

// Kernels before 6.9 (Debian 12's 6.1 among them) reject may_goto and get the walker whose
// scan calls back once per word: it must give the same stacks as the fast one.
TEST_F(SampleTest, CompatWalkerSameStacks) {
    ErlVm vm(workload("deep", 100));
    vm.wait_line("ready");
    setenv("BB_BPF_COMPAT", "1", 1);
    ToolResult r = run_tool(kTool, {"-d", "3", "--folded", "--only-erlang", pid_arg(vm)}, 60s);
    unsetenv("BB_BPF_COMPAT");
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    long all = 0, hundred = 0;
    for (const auto& [stack, count] : parse_folded(r.out)) {
        long n = 0;
        for (const auto& f : split_frames(stack)) n += f.rfind("bb_work:deep_rec/", 0) == 0;
        all += count;
        hundred += n == 100 ? count : 0;
    }
    std::cout << "compat walker: " << hundred << " of " << all << " samples carry exactly 100 deep_rec frames\n";
    ASSERT_GE(all, 1000) << describe(r);
    EXPECT_GE(pct(hundred, all), 95.0) << r.out.substr(0, 4000);
}

// --only-erlang means module:function/arity frames only: no native or JIT-helper names, even
// for the few samples that land in the VM's own code between Erlang instructions.
TEST_F(SampleTest, OnlyErlangFrames) {
    ErlVm vm(workload("split532"));
    vm.wait_line("ready");
    ToolResult r = run_tool(kTool, {"-d", "4", "--folded", "--only-erlang", pid_arg(vm)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    auto stacks = parse_folded(r.out);
    ASSERT_GE(total(stacks), 1000) << describe(r);
    expect_only_erlang(stacks);
}

struct TopRow {
    double self, total;
    std::string function;
};

// Default output: the schedulers' split by msacc state, a header line, then `SELF% TOTAL%
// FUNCTION` rows.
std::vector<TopRow> parse_top(const std::string& out) {
    auto lines = lines_of(out);
    std::vector<TopRow> rows;
    EXPECT_FALSE(lines.empty()) << "no output";
    if (lines.empty()) return rows;
    EXPECT_TRUE(lines[0].starts_with("Normal schedulers (")) << "the schedulers' line: " << lines[0];
    if (lines[0].starts_with("Normal schedulers (")) lines.erase(lines.begin());
    if (lines.empty()) return rows;
    EXPECT_TRUE(lines[0].find("SELF%") != std::string::npos && lines[0].find("TOTAL%") != std::string::npos &&
                lines[0].find("FUNCTION") != std::string::npos)
        << "header: " << lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
        if (lines[i].find("TOTAL%") != std::string::npos) break;  // the native code's section follows
        std::istringstream in(lines[i]);
        TopRow row;
        if (!(in >> row.self >> row.total >> row.function)) {
            ADD_FAILURE() << "malformed row: '" << lines[i] << "'";
            continue;
        }
        rows.push_back(row);
    }
    return rows;
}

TEST_F(SampleTest, DefaultTopOutput) {
    ErlVm vm(workload("split532"));
    vm.wait_line("ready");
    ToolResult r = run_tool(kTool, {"-d", "4", pid_arg(vm)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    expect_summary(r);
    std::cout << r.out;
    auto rows = parse_top(r.out);
    ASSERT_FALSE(rows.empty()) << describe(r);
    EXPECT_EQ(rows[0].function, "bb_work:f5/2") << describe(r);
    for (const auto& row : rows) {
        EXPECT_LE(row.self, row.total + 0.05) << row.function;
        EXPECT_LE(row.total, 100.05) << row.function;
    }
    // The split is of the workload's own time: the shares are taken of its root's TOTAL%, not of
    // every sample, of which the scheduler's own loop ([no Erlang process]) takes a few percent
    // more when the machine is loaded (4.3% once under ASan: f5's 46.8% was 48.9% of the
    // workload's). 3 points is 3.8 standard deviations of a 50% share at the 4,000 samples here.
    auto root = std::find_if(rows.begin(), rows.end(), [](auto& row) { return row.function == "bb_work:root/0"; });
    ASSERT_NE(root, rows.end()) << "bb_work:root/0 missing\n" << r.out;
    ASSERT_GT(root->total, 50) << r.out;
    for (int i = 0; i < 3; ++i) {
        auto it = std::find_if(rows.begin(), rows.end(), [&](auto& row) { return row.function == kLeaves[i]; });
        ASSERT_NE(it, rows.end()) << kLeaves[i] << " missing\n" << r.out;
        EXPECT_NEAR(100 * it->self / root->total, kExpectedShare[i], 3) << kLeaves[i];
    }
}

// Ctrl-C ends an open-ended run and still prints the profile.
TEST_F(SampleTest, SigintStopsAndPrints) {
    ErlVm vm(workload("split532"));
    vm.wait_line("ready");
    RunningTool t = start_tool(kTool, {pid_arg(vm)});
    std::string err;
    ASSERT_TRUE(wait_stderr(t, ": attached to ", 30s, &err)) << err;
    std::this_thread::sleep_for(3s);
    ToolResult r = finish_tool(t, true, 15s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    expect_summary(r);
    auto rows = parse_top(r.out);
    ASSERT_FALSE(rows.empty()) << describe(r);
    EXPECT_EQ(rows[0].function, "bb_work:f5/2") << describe(r);
}

// --- deep recursion ----------------------------------------------------------------------

const std::string kDeepRoot = "bb_work:deep_root/3", kDeepRec = "bb_work:deep_rec/3", kDeepLeaf = "bb_work:deep_leaf/2";

TEST_P(SampleVmTest, DeepRecursion) {
    const long depth = 100;
    ErlVm vm(this->vm(), workload("deep", depth));
    vm.wait_line("ready");
    ToolResult r = run_tool(kTool, {"-d", "3", "--folded", "--only-erlang", pid_arg(vm)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    expect_summary(r);
    auto stacks = parse_folded(r.out);

    std::vector<std::string> expected{kDeepRoot};
    expected.insert(expected.end(), depth, kDeepRec);
    expected.push_back(kDeepLeaf);
    long exact = 0;
    std::map<long, long> by_rec_frames;  // deep_rec frames on the stack -> samples
    for (const auto& [stack, count] : stacks) {
        auto frames = split_frames(stack);
        if (frames == expected) exact += count;
        by_rec_frames[std::count(frames.begin(), frames.end(), kDeepRec)] += count;
    }
    const long n = total(stacks);
    std::cout << "deep " << depth << ": " << n << " samples, " << pct(exact, n) << "% exactly root + " << depth
              << " deep_rec + leaf; deep_rec frames:";
    for (auto [frames, count] : by_rec_frames) std::cout << " " << frames << "x" << count;
    std::cout << "\n";

    ASSERT_GE(n, 1000) << describe(r);
    EXPECT_GE(pct(exact, n), 90.0) << "other stacks:\n" << odd_shapes(stacks, [&](auto& f) { return f == expected; });
    // A walker that read stale words below the stack would invent frames.
    EXPECT_LE(by_rec_frames.rbegin()->first, depth);
    EXPECT_EQ(stat(r, "truncated").value_or(-1), 0) << describe(r);
}

// Deeper than --max-depth (512): the sample keeps 512 frames and counts as truncated. 5,000 deep,
// they are the leaf-most 480 and the 32 root-most, with "[truncated N frames]" between, so the
// root (deep_root/3) stays; before, the walk kept only the leaf-most 512 and lost every caller.
// 100,000 deep is past what the walk scans for the root (BB_ROOT_SCAN_WORDS of stack): the
// leaf-most 480 stand under one marker frame in place of the root it did not reach.
TEST_P(SampleVmTest, DeepRecursionTruncated) {
    const long max_depth = 512;
    // The leaf-most 480: deep_rec/3 frames, and deep_leaf/2 last when the sample is in its JIT
    // code (in the VM's C code, 480 return addresses into deep_rec/3).
    auto leaf_most = [&](auto from, auto to) {
        return to - from == max_depth - 32 &&
               std::all_of(from, to - 1, [](const std::string& f) { return f == kDeepRec; }) &&
               (*(to - 1) == kDeepRec || *(to - 1) == kDeepLeaf);
    };
    static const std::regex cut_frame(R"(^\[truncated (\d+) frames\]$)");
    for (long depth : {5000L, 100000L}) {
        ErlVm vm(this->vm(), workload("deep", depth));
        vm.wait_line("ready", 60s);
        ToolResult r = run_tool(kTool,
                                {"-d", "3", "--folded", "--only-erlang", "--max-depth", std::to_string(max_depth),
                                 pid_arg(vm)},
                                60s);
        ASSERT_EQ(r.exit_code, 0) << describe(r);
        expect_summary(r);
        auto stacks = parse_folded(r.out);
        long rooted = 0, beyond_scan = 0;
        for (const auto& [stack, count] : stacks) {
            auto frames = split_frames(stack);
            if (!frames.empty() && frames[0] == "[truncated: stack deeper than the walk scans]") {
                if (leaf_most(frames.begin() + 1, frames.end())) beyond_scan += count;
                continue;
            }
            // deep_root/3 and 30 deep_rec/3 (the ring's 32 slots hold the VM's exit stub too, no
            // caller), the cut, then the leaf-most 480.
            auto cut = std::find_if(frames.begin(), frames.end(),
                                    [](const std::string& f) { return f.starts_with("[truncated "); });
            if (cut == frames.end() || frames[0] != kDeepRoot) continue;
            std::smatch m;
            if (!std::regex_match(*cut, m, cut_frame) || std::stol(m[1]) < depth - max_depth) continue;
            if (!leaf_most(cut + 1, frames.end())) continue;
            if (std::any_of(frames.begin() + 1, cut, [](const std::string& f) { return f != kDeepRec; })) continue;
            rooted += count;
        }
        const long n = total(stacks);
        const long truncated = stat(r, "truncated").value_or(-1);
        std::cout << this->vm().name << ", deep " << depth << ", --max-depth " << max_depth << ": " << n << " samples, "
                  << truncated << " truncated per summary, " << pct(rooted, n)
                  << "% with the root, the cut and the leaf-most 480 frames, " << pct(beyond_scan, n)
                  << "% deeper than the scan\n";
        ASSERT_GE(n, 1000) << "samples dropped instead of truncated?\n" << describe(r);
        EXPECT_GE(truncated, n * 9 / 10) << describe(r);
        EXPECT_GE(pct(depth < 10000 ? rooted : beyond_scan, n), 90.0)
            << odd_shapes(stacks, [&](auto&) { return false; });
        EXPECT_GE(pct(rooted + beyond_scan, n), 99.0) << odd_shapes(stacks, [&](auto&) { return false; });
    }
}

// --- pstack ------------------------------------------------------------------------------

struct SchedulerBlock {
    int number = 0;
    long tid = 0;
    std::string what;                 // `<0.85.0>` or `idle`
    std::string name;                 // the process's name, "" if none
    std::vector<std::string> frames;  // leaf first
};

std::vector<SchedulerBlock> parse_pstack(const std::string& out) {
    static const std::regex head(R"(^scheduler (\d+) \(tid (\d+)\): (\S+)(?: (.+))?$)");
    std::vector<SchedulerBlock> blocks;
    for (const auto& line : lines_of(out)) {
        std::smatch m;
        if (std::regex_match(line, m, head)) {
            blocks.push_back({std::stoi(m[1]), std::stol(m[2]), m[3], m[4], {}});
        } else if (!blocks.empty() && (line[0] == ' ' || line[0] == '\t')) {
            blocks.back().frames.push_back(line.substr(line.find_first_not_of(" \t")));
        } else {
            ADD_FAILURE() << "unexpected --pstack line: '" << line << "'";
        }
    }
    return blocks;
}

std::string thread_name(pid_t pid, long tid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(tid) + "/comm");
    std::string name;
    std::getline(in, name);
    return name;
}

TEST_P(SampleVmTest, Pstack) {
    ErlVm vm(this->vm(), workload("busy2"), {"+S", "2"});
    std::istringstream ready(vm.wait_line("ready"));
    std::string word, pid_a, pid_b;
    ready >> word >> pid_a >> pid_b;
    ASSERT_TRUE(pid_a.starts_with("<") && pid_b.starts_with("<")) << vm.output();
    std::this_thread::sleep_for(1s);  // let the second scheduler steal one of the two

    // A process caught while it yields (the JIT's reduction check at spin_x's entry jumps to
    // global::i_test_yield_shared, then to the scheduler) has not entered spin_x yet: the right
    // snapshot then shows shared or native code straight above caller_x. Every snapshot must
    // be right; at least one of a few must catch both processes inside spin_x.
    int both_inside = 0;
    for (int attempt = 0; attempt < 5 && both_inside == 0; attempt++) {
        ToolResult r = run_tool(kTool, {"--pstack", pid_arg(vm)}, 30s);
        std::cout << "--pstack took " << r.seconds << " s:\n" << r.out;
        ASSERT_EQ(r.exit_code, 0) << describe(r);

        auto blocks = parse_pstack(r.out);
        std::map<std::string, const SchedulerBlock*> busy;  // Erlang pid -> its block
        std::set<int> numbers;
        for (const auto& b : blocks) {
            EXPECT_TRUE(numbers.insert(b.number).second) << "scheduler " << b.number << " twice";
            if (b.what != "idle") busy[b.what] = &b;
            if (b.number <= 2) {  // normal schedulers; the tool may also list dirty ones
                // OTP 26 renamed the scheduler threads.
                std::string name = this->vm().otp_release >= 26 ? "erts_sched_" + std::to_string(b.number)
                                                                : std::to_string(b.number) + "_scheduler";
                EXPECT_EQ(thread_name(vm.os_pid(), b.tid), name) << "tid " << b.tid << " of scheduler " << b.number;
            }
        }
        ASSERT_EQ(busy.size(), 2u) << r.out;
        ASSERT_TRUE(busy.count(pid_a) && busy.count(pid_b)) << "expected " << pid_a << " and " << pid_b << "\n"
                                                            << r.out;
        int inside = 0;
        for (auto [pid, leaf, caller] : {std::tuple{pid_a, "bb_work:spin_a/2", "bb_work:caller_a/1"},
                                         std::tuple{pid_b, "bb_work:spin_b/2", "bb_work:caller_b/1"}}) {
            const auto& f = busy[pid]->frames;
            // spawn/3 started it: its initial call names it.
            EXPECT_EQ(busy[pid]->name, caller) << r.out;
            auto at_caller = std::find(f.begin(), f.end(), caller);
            ASSERT_TRUE(at_caller != f.end()) << pid << " should show " << caller << "\n" << r.out;
            auto at_leaf = std::find(f.begin(), at_caller, leaf);
            if (at_leaf != at_caller) {
                inside++;
                continue;
            }
            // Not inside spin_x: then nothing above caller_x may be an Erlang function.
            static const std::regex erlang_function(R"(^[^:\s]+:[^:\s]+/\d+( .*)?$)");
            for (auto it = f.begin(); it != at_caller; ++it)
                EXPECT_FALSE(std::regex_match(*it, erlang_function))
                    << pid << ": " << *it << " above " << caller << " is neither " << leaf
                    << " nor shared or native code\n"
                    << r.out;
        }
        if (inside == 2) both_inside++;
    }
    EXPECT_EQ(both_inside, 1) << "no snapshot of 5 caught both processes inside spin_a and spin_b";
}

// Deep recursion in --pstack and in profiles: a gen_server whose handle_call/3 recurses 3000
// deep, past --max-depth 512. --pstack shows the run as one line "bb_work:deep_rec/3 xN", not
// hundreds of lines; and the truncated stack keeps its callers: the root-most frames
// (gen_server's, handle_call/3) above a "[truncated N frames]" frame, where before the walk kept
// only the leaf-most 512 and the server's callers were lost.
TEST_P(SampleVmTest, DeepRecursionFoldsAndKeepsItsCallers) {
    ErlVm vm(this->vm(), workload("deep_server", 3000));
    std::istringstream ready(vm.wait_line("ready"));
    std::string word, server;
    ready >> word >> server;
    ASSERT_TRUE(server.starts_with("<")) << vm.output();
    ToolResult r = run_tool(kTool, {"--pstack", pid_arg(vm)}, 30s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    auto blocks = parse_pstack(r.out);
    auto b = std::find_if(blocks.begin(), blocks.end(), [&](const SchedulerBlock& x) { return x.what == server; });
    ASSERT_NE(b, blocks.end()) << r.out;
    static const std::regex run(R"(^bb_work:deep_rec/3 x(\d+)$)"), cut(R"(^\[truncated (\d+) frames\]$)");
    long folded = 0, skipped = -1;
    size_t at_cut = 0, at_handle_call = 0;
    for (size_t i = 0; i < b->frames.size(); i++) {  // leaf first
        std::smatch m;
        if (std::regex_match(b->frames[i], m, run)) folded = std::max(folded, std::stol(m[1]));
        if (std::regex_match(b->frames[i], m, cut)) skipped = std::stol(m[1]), at_cut = i;
        if (b->frames[i] == "bb_work:handle_call/3") at_handle_call = i;
    }
    EXPECT_GT(folded, 400) << r.out;
    EXPECT_LT(b->frames.size(), 14u) << r.out;
    // 3000 deep_rec frames and a few of gen_server's, of which 512 are kept.
    EXPECT_GT(skipped, 2400) << r.out;
    EXPECT_LT(skipped, 2600) << r.out;
    EXPECT_GT(at_handle_call, at_cut) << "handle_call/3 should be a caller of the truncated run:\n" << r.out;
    EXPECT_TRUE(std::ranges::any_of(b->frames, [](const std::string& f) { return f.starts_with("gen_server:"); }))
        << r.out;

    // The profile's stacks: every sample of the server is rooted in its callers.
    ToolResult p = run_tool(kTool, {"-d", "2", "--folded", "--process", server, pid_arg(vm)}, 60s);
    ASSERT_EQ(p.exit_code, 0) << describe(p);
    long samples = 0, rooted = 0;
    for (const auto& line : lines_of(p.out)) {
        if (line.empty()) continue;
        long n = std::stol(line.substr(line.rfind(' ') + 1));
        samples += n;
        if (line.find("bb_work:handle_call/3;") != std::string::npos && line.find(";[truncated ") != std::string::npos)
            rooted += n;
    }
    std::cout << this->vm().name << ": " << rooted << " of " << samples
              << " samples of the 3000-deep server have handle_call/3 above [truncated N frames]\n";
    EXPECT_GT(samples, 100) << p.out;
    EXPECT_EQ(rooted, samples) << p.out;
}

// A dirty CPU scheduler that has finished a dirty GC still points at the process
// (current_process) while its thread goes back to sleep, and the process runs again on a normal
// scheduler meanwhile: without checking the process's state and scheduler, that sleeping
// scheduler's samples went to the process. And --pstack, whose blocks are samples of different
// instants, showed a process that moved (the sorter, between normal and dirty schedulers) on two
// schedulers at once: 8 duplicates in 15 snapshots before it kept only the latest.
TEST_P(SampleReleaseTest, StaleDirtySchedulerNotAttributed) {
    ErlVm vm(this->vm(), workload("dirty_gc"), {"+S", "2"});
    std::istringstream ready(vm.wait_line("ready", 60s));
    std::string word, pid_a, pid_b, pid_gc;
    ready >> word >> pid_a >> pid_b >> pid_gc;
    ASSERT_TRUE(pid_gc.starts_with("<")) << vm.output();
    std::this_thread::sleep_for(1s);

    // Six snapshots: the GC process was on a dirty scheduler in every one of 15 in CI's runs.
    int snapshots = 0, gc_on_dirty = 0;
    for (int i = 0; i < 6; i++) {
        ToolResult r = run_tool(kTool, {"--pstack", pid_arg(vm)}, 30s);
        ASSERT_EQ(r.exit_code, 0) << describe(r);
        std::map<std::string, int> shown;  // pid -> schedulers showing it
        static const std::regex head(R"(^(dirty (cpu|io) )?scheduler \d+ \(tid \d+\): (<[0-9.]+>)( .*)?$)");
        for (const auto& line : lines_of(r.out)) {
            std::smatch m;
            if (!std::regex_match(line, m, head)) continue;
            shown[m[3]]++;
            gc_on_dirty += m[1].matched && m[3] == pid_gc;
        }
        for (const auto& [pid, n] : shown) EXPECT_EQ(n, 1) << pid << " on " << n << " schedulers at once:\n" << r.out;
        snapshots++;
    }
    std::string stats = ::testing::TempDir() + "bb_dirty_gc_stats.json";
    // About 12 such samples a second (47 in 4 s on every release in CI): 2 s are enough to see one.
    ToolResult r = run_tool(kTool, {"-d", "2", "--folded", "--stats", stats, pid_arg(vm)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::ifstream in(stats);
    auto j = nlohmann::json::parse(in);
    long records = j.at("records"), not_running = j.at("not_running");
    std::cout << this->vm().name << ": " << snapshots << " pstack snapshots, the GC process on a dirty scheduler in "
              << gc_on_dirty << "; profile: " << not_running << " of " << records
              << " samples had a scheduler pointing at a process not running there (kept as the scheduler's)\n";
    EXPECT_GT(gc_on_dirty, 0) << "the workload's collections did not run on a dirty scheduler";
    EXPECT_GT(not_running, 0) << "no stale current_process seen: the workload no longer shows the case";
}

// Processes that live about a millisecond (bb_work's short_tasks: proc_lib workers with
// Elixir's '$callers') are gone when their records are read, up to 100 ms later: named from
// what the walker read of their dictionaries at the sample ('$initial_call', '$callers'), they
// are one group under their real name and their caller. Before, every one was
// proc_lib:init_p/5, the VM's initial call. Those sampled before the run's first drain taught
// the walker the dictionary's keys still are: a few percent.
TEST_P(SampleReleaseTest, ShortLivedTasksKeepTheirNames) {
    ErlVm vm(this->vm(), workload("short_tasks"));
    vm.wait_line("ready");
    ToolResult r = run_tool(kTool, {"-d", "3", "--by-process", "--folded", pid_arg(vm)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    long named = 0, in_tasks = 0;
    std::string root;
    for (const auto& [stack, n] : parse_folded(r.out)) {
        // short_task/2 tail-calls named_spin/3, which only the tasks run: their samples, however named.
        if (stack.find(";bb_work:named_spin/3") == std::string::npos) continue;
        in_tasks += n;
        std::string first = split_frames(stack).front();
        if (first.starts_with("bb_work:short_task/2 (task of bb_spawner) (")) named += n, root = first;
    }
    std::cout << this->vm().name << ": " << named << " of " << in_tasks << " samples of the tasks under '" << root
              << "'\n";
    ASSERT_GE(in_tasks, 300) << describe(r);
    EXPECT_GE(pct(named, in_tasks), 85.0) << r.out.substr(0, 3000);
    static const std::regex many(R"(\((\d+) processes\)$)");
    std::smatch m;
    ASSERT_TRUE(std::regex_search(root, m, many)) << root;
    EXPECT_GE(std::stol(m[1]), 100) << root;
}

// --- isolation ---------------------------------------------------------------------------

// Per-thread events (the default): the program runs for the VM's samples only, while a busy
// neighbour process goes on; with --per-cpu, the neighbour's samples run it too (and are
// dropped at its first check). The kernel's own count of program runs is the oracle.
TEST_P(SampleReleaseTest, PerThreadEventsOnlyRunForTheVm) {
    ErlVm vm(this->vm(), workload("busy2"), {"+S", "2"});
    vm.wait_line("ready");
    ChildProcess neighbour({"sh", "-c", "while :; do :; done"});
    struct BpfStats {  // kernel.bpf_stats_enabled, on for the test, restored after
        std::string old;
        BpfStats() {
            std::ifstream("/proc/sys/kernel/bpf_stats_enabled") >> old;
            std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << "1";
        }
        ~BpfStats() { std::ofstream("/proc/sys/kernel/bpf_stats_enabled") << (old.empty() ? "0" : old); }
    } enabled;
    for (bool per_cpu : {false, true}) {
        std::string stats = ::testing::TempDir() + "bb_events_stats.json";
        std::vector<std::string> args{"-d", "3", "--folded", "--stats", stats, pid_arg(vm)};
        if (per_cpu) args.insert(args.begin(), "--per-cpu");
        ToolResult r = run_tool(kTool, args, 60s);
        ASSERT_EQ(r.exit_code, 0) << describe(r);
        EXPECT_TRUE(any_frame_contains(parse_folded(r.out), "bb_work:spin_a/2")) << describe(r);
        std::ifstream in(stats);
        auto j = nlohmann::json::parse(in);
        long seen = j.at("seen"), runs = j.at("bpf_prog_run_cnt"), events = j.at("events");
        std::cout << this->vm().name << (per_cpu ? " --per-cpu: " : " per-thread: ") << events << " events, " << runs
                  << " program runs for " << seen << " samples of the VM\n";
        ASSERT_GT(seen, 1000) << describe(r);
        if (per_cpu) EXPECT_GT(runs, seen + 500) << "the neighbour's samples should run the program too";
        else EXPECT_EQ(runs, seen) << "a sample of another process ran the program";
    }
}

TEST_P(SampleReleaseTest, NoSamplesFromOtherProcesses) {
    ErlVm split(this->vm(), workload("split532"));
    ErlVm busy(this->vm(), workload("busy2"), {"+S", "2"});
    split.wait_line("ready");
    busy.wait_line("ready");

    ToolResult rs = run_tool(kTool, {"-d", "3", "--folded", pid_arg(split)}, 60s);
    ASSERT_EQ(rs.exit_code, 0) << describe(rs);
    ToolResult rb = run_tool(kTool, {"-d", "3", "--folded", pid_arg(busy)}, 60s);
    ASSERT_EQ(rb.exit_code, 0) << describe(rb);
    auto ss = parse_folded(rs.out), sb = parse_folded(rb.out);
    std::cout << "split532 VM: " << total(ss) << " samples; busy2 VM: " << total(sb) << " samples\n";

    EXPECT_TRUE(any_frame_contains(ss, "bb_work:f5/2")) << describe(rs);
    EXPECT_TRUE(any_frame_contains(sb, "bb_work:spin_a/2")) << describe(rb);
    EXPECT_TRUE(any_frame_contains(sb, "bb_work:spin_b/2")) << describe(rb);
    for (const char* other : {"spin_a", "spin_b", "caller_a", "caller_b"})
        EXPECT_FALSE(any_frame_contains(ss, other)) << other << " in the split532 VM's profile";
    for (const char* other : {"f5/", "f3/", "f2/", "chain1", "chain2", "bb_work:root"})
        EXPECT_FALSE(any_frame_contains(sb, other)) << other << " in the busy2 VM's profile";
}

// --- chaos -------------------------------------------------------------------------------

// SIGKILL leaves the tool no chance to clean up: the kernel must drop its programs, links and
// maps with its file descriptors. bpftool lists what is loaded before, during and after.
TEST_F(SampleTest, KilledProfilerLeavesNothingLoaded) {
    auto progs = [] {
        std::set<long> ids;
        FILE* p = popen("bpftool -j prog show 2>/dev/null; bpftool -j map show 2>/dev/null", "r");
        if (!p) return ids;
        std::string out;
        char buf[4096];
        for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
        pclose(p);
        static const std::regex id(R"("id":(\d+))");
        for (std::sregex_iterator it(out.begin(), out.end(), id), end; it != end; ++it) ids.insert(std::stol((*it)[1]));
        return ids;
    };
    ErlVm vm(workload("split532"));
    vm.wait_line("ready");
    const auto before = progs();
    RunningTool t = start_tool(kTool, {"-d", "60", pid_arg(vm)});
    std::string err;
    ASSERT_TRUE(wait_stderr(t, ": attached to ", 30s, &err)) << err;
    const auto during = progs();
    EXPECT_GT(during.size(), before.size()) << "bpftool does not see the tool's programs and maps";
    kill(t.pid, SIGKILL);
    finish_tool(t, false, 10s);
    std::set<long> after;
    for (int i = 0; i < 50; i++) {  // the kernel frees them once the last reference goes
        after = progs();
        if (after == before) break;
        std::this_thread::sleep_for(100ms);
    }
    std::cout << "BPF programs and maps: " << before.size() << " before, " << during.size() << " attached, "
              << after.size() << " after SIGKILL\n";
    EXPECT_EQ(after, before);
}

// Two profilers on one VM at once: each has its own program, maps and events, and each sees
// the whole profile.
TEST_F(SampleTest, TwoProfilersAtOnce) {
    ErlVm vm(workload("split532"));
    vm.wait_line("ready");
    RunningTool a = start_tool(kTool, {"-d", "4", "--folded", "--only-erlang", pid_arg(vm)});
    RunningTool b = start_tool(kTool, {"-d", "4", "--folded", "--only-erlang", pid_arg(vm)});
    ToolResult ra = finish_tool(a, false, 30s), rb = finish_tool(b, false, 30s);
    for (const ToolResult* r : {&ra, &rb}) {
        ASSERT_EQ(r->exit_code, 0) << describe(*r);
        auto stacks = parse_folded(r->out);
        long f5 = 0, all = 0;
        for (const auto& [stack, count] : stacks) {
            if (stack.find("bb_work:f") == std::string::npos) continue;
            all += count;
            if (stack.ends_with(kLeaves[0])) f5 += count;
        }
        std::cout << "one of two profilers: " << all << " samples, f5 " << pct(f5, all) << "%\n";
        ASSERT_GE(all, 2000) << describe(*r);
        EXPECT_NEAR(pct(f5, all), 50.0, 3.0) << describe(*r);
    }
}

nlohmann::json read_stats(const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
}

// A reader stalled while the walker writes at the highest rate the tool accepts, with deep
// stacks (4 KiB records): the ring fills. Drops are counted in the kernel and reported, every
// record the walker emitted is read (the events stop before the last drain), and the run still
// ends on time.
TEST_F(SampleTest, RingOverflowAtMaxRate) {
    ErlVm vm(workload("deep", 2000));
    vm.wait_line("ready");
    std::string stats = ::testing::TempDir() + "bb_overflow_stats.json";
    RunningTool t = start_tool(kTool, {"-F", "100000", "-d", "6", "--folded", "--stats", stats, pid_arg(vm)});
    std::string err;
    ASSERT_TRUE(wait_stderr(t, ": attached to ", 30s, &err)) << err;
    std::this_thread::sleep_for(1s);
    kill(t.pid, SIGSTOP);  // as a reader starved of CPU would be
    std::this_thread::sleep_for(2s);
    kill(t.pid, SIGCONT);
    ToolResult r = finish_tool(t, false, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    auto j = read_stats(stats);
    long seen = j.at("seen"), emitted = j.at("emitted"), dropped = j.at("dropped"), records = j.at("records"),
         errors = j.at("handler_errors");
    double seconds = j.at("seconds");
    std::cout << "-F 100000, reader stopped 2 s: " << seen << " samples, " << emitted << " emitted, " << dropped
              << " dropped, " << records << " read, run " << seconds << " s\n";
    EXPECT_GT(dropped, 0) << "a reader stopped for 2 s at 100 kHz should lose records\n" << describe(r);
    EXPECT_EQ(seen, emitted + dropped);
    EXPECT_EQ(records + errors, emitted) << "records emitted but never read";
    EXPECT_EQ(errors, 0);
    EXPECT_EQ(stat(r, "dropped").value_or(-1), dropped) << describe(r);
    EXPECT_EQ(total(parse_folded(r.out)), records);
    EXPECT_LT(seconds, 6.0 + 4.0) << "the drain kept the run past its end";
}

// A handler that throws (here injected: every 10th record, as a symbolizer bug would) loses
// that record only: the profile of the others is printed, the loss counted and said.
TEST_F(SampleTest, HandlerErrorsLoseOnlyTheirRecords) {
    ErlVm vm(workload("split532"));
    vm.wait_line("ready");
    std::string stats = ::testing::TempDir() + "bb_inject_stats.json";
    setenv("BB_INJECT_HANDLER_ERROR", "10", 1);
    ToolResult r = run_tool(kTool, {"-F", "4999", "-d", "3", "--folded", "--stats", stats, pid_arg(vm)}, 60s);
    unsetenv("BB_INJECT_HANDLER_ERROR");
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    auto j = read_stats(stats);
    long emitted = j.at("emitted"), records = j.at("records"), errors = j.at("handler_errors");
    std::cout << emitted << " records emitted, " << errors << " lost to injected errors, " << records
              << " in the profile\n";
    ASSERT_GT(emitted, 1000) << describe(r);
    EXPECT_EQ(errors, emitted / 10);
    EXPECT_EQ(records + errors, emitted);
    EXPECT_EQ(total(parse_folded(r.out)), records);
    EXPECT_TRUE(any_frame_contains(parse_folded(r.out), "bb_work:f5/2")) << describe(r);
    EXPECT_NE(r.err.find(std::to_string(errors) + " records lost to errors (first: injected fault"), std::string::npos)
        << describe(r);
}

// -e cycles needs a hardware PMU: where the kernel has one (a "cpu" event source) the profile
// is taken on cycles; where it has none (most VMs, this one included) the tool says so in one
// line instead of falling back silently.
TEST_F(SampleTest, CyclesEventOrOneLineError) {
    ErlVm vm(workload("split532"));
    vm.wait_line("ready");
    const bool pmu = std::filesystem::exists("/sys/bus/event_source/devices/cpu") ||
                     std::filesystem::exists("/sys/bus/event_source/devices/cpu_core");
    ToolResult r = run_tool(kTool, {"-e", "cycles", "-d", "3", "--folded", pid_arg(vm)}, 60s);
    std::cout << "hardware PMU: " << (pmu ? "yes" : "no") << "\n" << r.err;
    if (pmu) {
        ASSERT_EQ(r.exit_code, 0) << describe(r);
        EXPECT_NE(r.err.find("cycles 999 Hz"), std::string::npos) << describe(r);
        EXPECT_TRUE(any_frame_contains(parse_folded(r.out), "bb_work:f5/2")) << describe(r);
    } else {
        std::string line = expect_one_line_error(r, kTool);
        EXPECT_NE(line.find("no hardware PMU"), std::string::npos) << line;
        EXPECT_NE(line.find("-e cpu-clock"), std::string::npos) << line;
    }
    ToolResult bad = run_tool(kTool, {"-e", "instructions", "-d", "1", pid_arg(vm)}, 30s);
    EXPECT_NE(expect_one_line_error(bad, kTool).find("cpu-clock, cycles, alloc, alloc-gc, wall and offcpu"),
              std::string::npos);
}

// --- errors ------------------------------------------------------------------------------

// A mistyped option, in every tool: one line in the tool's own voice, exit code 2 (a usage
// error), and the option meant where one is near. The agent's settings file likewise.
TEST(UsageTest, TyposAreOneLineWithTheNearestOption) {
    struct Case {
        std::string tool;
        std::vector<std::string> args;
        std::string meant;  // "" when nothing is near
    };
    const std::vector<Case> cases{
        {"beam-bpf-sample", {"--by-proces", "1"}, "--by-process"},
        {"beam-bpf-sample", {"--frequncy=99", "1"}, "--frequency"},
        {"beam-bpf-blame", {"--exat", "erts_garbage_collect", "1"}, "--exact"},
        {"beam-bpf-blame", {"--threshold", "5", "erts_garbage_collect", "1"}, ""},  // -e offcpu's, not blame's
        {"beam-bpf-procs", {"--wach", "1", "1"}, "--watch"},
        {"beam-bpf-vms", {"--hepl"}, "--help"},
        {"beam-bpf-perfmap", {"--completely-unknown", "1"}, ""},
        {"beam-bpf-agent", {"--frequncy", "99"}, "--frequency"},
    };
    for (const Case& c : cases) {
        SCOPED_TRACE(c.tool + " " + c.args.front());
        ToolResult r = run_tool(c.tool, c.args, 30s);
        const std::string line = expect_one_line_error(r, c.tool);
        EXPECT_EQ(r.exit_code, 2) << describe(r);
        if (c.meant.empty()) EXPECT_EQ(line.find("did you mean"), std::string::npos) << line;
        else EXPECT_NE(line.find("; did you mean " + c.meant + "?"), std::string::npos) << line;
    }
    const std::string config = ::testing::TempDir() + "/bb_typo.conf";
    std::ofstream(config) << "frequncy=99\n";
    ToolResult r = run_tool("beam-bpf-agent", {"--check", "--config", config}, 30s);
    EXPECT_NE(expect_one_line_error(r, "beam-bpf-agent").find("unknown setting frequncy; did you mean frequency?"),
              std::string::npos);
}

TEST_F(SampleTest, ErrorDeadPid) {
    ToolResult r = run_tool(kTool, {"-d", "3", std::to_string(dead_pid())}, 30s);
    expect_error(r, {"no such process"});
}

TEST_F(SampleTest, ErrorNotABeam) {
    ChildProcess sleeper({"sleep", "60"});
    ToolResult r = run_tool(kTool, {"-d", "3", std::to_string(sleeper.pid())}, 30s);
    expect_error(r, {"not a BEAM VM"});
}

TEST_P(SampleVmTest, ErrorUnprivileged) {
    ErlVm vm(this->vm(), workload("idle"));
    vm.wait_line("ready");
    ToolResult r = run_tool(kTool, {"-d", "3", pid_arg(vm)}, 30s, "nobody");
    expect_error(r, {"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE", "run as root"});
}

// The VM dies under the tool: it stops by itself, prints what it had, and says why.
TEST_P(SampleReleaseTest, VmKilledMidRun) {
    ErlVm vm(this->vm(), workload("split532"));
    vm.wait_line("ready");
    RunningTool t = start_tool(kTool, {"-d", "30", pid_arg(vm)});
    std::string err;
    ASSERT_TRUE(wait_stderr(t, ": attached to ", 30s, &err)) << err;
    std::this_thread::sleep_for(2s);
    const auto killed_at = Clock::now();
    vm.kill_now();
    ToolResult r = finish_tool(t, false, 15s);
    const double after_kill = std::chrono::duration<double>(Clock::now() - killed_at).count();
    std::cout << "tool exited " << after_kill << " s after the VM was killed, code " << r.exit_code << "\n" << r.err;

    ASSERT_NE(r.exit_code, -1) << "still running 15 s after the VM died\n" << describe(r);
    EXPECT_LT(after_kill, 5.0);
    EXPECT_NE(r.out.find("bb_work:f5/2"), std::string::npos)
        << "the samples collected before the VM died were not printed\n"
        << describe(r);
    EXPECT_GT(stat(r, "records").value_or(0), 0) << describe(r);
    EXPECT_TRUE(std::regex_search(r.err, std::regex("exit", std::regex::icase)))
        << "stderr does not say the VM exited\n"
        << describe(r);
}

}  // namespace sample_test
