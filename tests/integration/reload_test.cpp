// beam-bpf-sample against a VM that reloads and purges a module 100 times a second
// (tests/workloads/bb_reload.erl): no sample may be attributed to code that was not at its
// address at the instant of the sample. The JIT frees a purged version's memory and the next
// load takes it, so one address holds alpha's code, then beta's, then alpha's again, each for
// tens of milliseconds, and the tool must know which was there at each sample's instant. The
// two versions have different function names and different layouts (see bb_reload.erl), so a
// frame named from the wrong version shows up as a pad function that never runs, a chain out
// of order, or alpha and beta frames in one stack. These tests load BPF: they need root and
// never skip.
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "harness.hpp"

namespace reload_test {

using namespace bbt;

const std::string kTool = "beam-bpf-sample";
const std::string kWorker = "bb_reload:worker/1";
const std::string kUnknownJit = "[unknown JIT code]";  // symbolizer.cpp's name for a miss

double pct(long part, long whole) { return whole ? 100.0 * double(part) / double(whole) : 0; }

// The loader's counters, asked from the VM (`stats` on its stdin).
struct LoaderStats {
    long loads = 0, alpha = 0, beta = 0, retries = 0, ms = 0;
};

LoaderStats loader_stats(ErlVm& vm) {
    vm.send_line("stats");
    std::string line = vm.wait_line("stats ");
    static const std::regex re(R"(^stats loads=(\d+) alpha=(\d+) beta=(\d+) retries=(\d+) ms=(-?\d+)\s*$)");
    std::smatch m;
    if (!std::regex_match(line, m, re)) {
        ADD_FAILURE() << "malformed stats line: '" << line << "'";
        return {};
    }
    return {std::stol(m[1]), std::stol(m[2]), std::stol(m[3]), std::stol(m[4]), std::stol(m[5])};
}

// What one folded stack of the worker says about the module's versions.
enum class Verdict {
    Alpha,    // worker;run;alpha_outer;alpha_inner, or a prefix of it
    Beta,     // the same with beta
    Neither,  // the worker between two calls, or in run/1: no version to tell
    Unknown,  // a JIT frame the tool could not name (and nothing wrong otherwise)
    Wrong,    // anything else: a frame named from code that was not there
};

const char* verdict_name(Verdict v) {
    switch (v) {
    case Verdict::Alpha: return "alpha";
    case Verdict::Beta: return "beta";
    case Verdict::Neither: return "neither";
    case Verdict::Unknown: return "unknown";
    case Verdict::Wrong: return "wrong";
    }
    return "?";
}

// An Erlang function's frame: module:function/arity.
bool is_erlang(const std::string& frame) {
    static const std::regex mfa(R"(^[^:;\s]+:[^:;\s]+/\d+$)");
    return std::regex_match(frame, mfa);
}

// The worker's stack, root first, is worker/1, then a prefix of run/1, X_outer/1, X_inner/2
// for one version X, then native or JIT shared code at the leaf (a reduction check that yields,
// a scheduler, the kernel). Nothing else runs on it: the workload calls no BIF in the loop.
Verdict classify(const std::vector<std::string>& frames) {
    if (frames.empty() || (frames[0] != kWorker && frames[0] != kUnknownJit)) return Verdict::Wrong;
    bool unknown = frames[0] == kUnknownJit;
    size_t i = 1;
    // The module's frames: one version's chain, in order, with unknown frames in place of
    // frames the tool could not name.
    std::string version;
    static const std::string chain_alpha[] = {"bb_reloaded:run/1", "bb_reloaded:alpha_outer/1",
                                              "bb_reloaded:alpha_inner/2"};
    static const std::string chain_beta[] = {"bb_reloaded:run/1", "bb_reloaded:beta_outer/1",
                                             "bb_reloaded:beta_inner/2"};
    size_t depth = 0;
    for (; i < frames.size() && depth < 3; ++i, ++depth) {
        const std::string& f = frames[i];
        if (f == kUnknownJit) {
            unknown = true;
            continue;
        }
        // The leaf may be JIT code that is no function ("bb_reloaded::codeFooter",
        // "global::i_test_yield_shared"): the loop below takes it.
        if (!is_erlang(f) || !f.starts_with("bb_reloaded:")) break;
        if (f == chain_alpha[depth] && version != "beta") {
            if (depth > 0) version = "alpha";
        } else if (f == chain_beta[depth] && version != "alpha") {
            if (depth > 0) version = "beta";
        } else {
            return Verdict::Wrong;  // a pad function, the chain out of order, alpha with beta
        }
    }
    // The leaf: native or JIT shared code only, never another Erlang function.
    for (; i < frames.size(); ++i) {
        if (frames[i] == kUnknownJit) {
            unknown = true;
            continue;
        }
        if (is_erlang(frames[i])) return Verdict::Wrong;
    }
    if (unknown) return Verdict::Unknown;
    if (version == "alpha") return Verdict::Alpha;
    if (version == "beta") return Verdict::Beta;
    return Verdict::Neither;  // worker/1 alone, or run/1 (the same in both versions) at the leaf
}

class ReloadTest : public VmTest {};
// Run on every test VM (harness.hpp): OTP 25 keeps purged modules in the JIT's debugger list
// (their memory reused by newer ones), OTP 27 unlinks them; frame pointers change the walk.
INSTANTIATE_TEST_SUITE_P(Vms, ReloadTest, ::testing::ValuesIn(release_vms()), test_vm_name);

TEST_P(ReloadTest, NoSampleInCodeThatWasNotThere) {
    // One scheduler: a load then waits for no other scheduler at the code barrier. With the
    // default two, the loader managed only 37 to 68 loads a second under the profiler on this
    // 2-CPU machine (other tests running); with one, 41 to 100 (see the bound at the end).
    ErlVm erl(vm(), "bb_reload:main()", {"+S", "1"});
    std::istringstream ready(erl.wait_line("ready", 60s));
    std::string word, worker;
    ready >> word >> worker;
    ASSERT_TRUE(worker.starts_with("<")) << erl.output();

    const LoaderStats before = loader_stats(erl);
    // --process: the worker's samples only (the loader and the code server run the compiler's
    // and the loader's Erlang code, which is not what is checked here).
    ToolResult r = run_tool(kTool, {"-d", "5", "--folded", "--process", worker, std::to_string(erl.os_pid())}, 60s);
    const LoaderStats after = loader_stats(erl);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    auto stacks = parse_folded(r.out);

    std::map<Verdict, long> by_verdict;
    std::map<std::string, long> wrong, unknown;
    long all = 0;
    for (const auto& [stack, count] : stacks) {
        Verdict v = classify(split_frames(stack));
        by_verdict[v] += count;
        all += count;
        if (v == Verdict::Wrong) wrong[stack] += count;
        if (v == Verdict::Unknown) unknown[stack] += count;
    }
    const long loads = after.loads - before.loads;
    const double seconds = double(after.ms - before.ms) / 1000.0;
    std::cout << std::fixed << std::setprecision(2) << vm().name << ": " << loads << " loads in " << seconds << " s ("
              << (seconds > 0 ? double(loads) / seconds : 0) << "/s; " << after.alpha - before.alpha << " alpha, "
              << after.beta - before.beta << " beta, " << after.retries - before.retries
              << " purges retried); worker: " << all << " samples:";
    for (auto [v, n] : by_verdict) std::cout << " " << verdict_name(v) << " " << n << " (" << pct(n, all) << "%)";
    std::cout << "; summary: " << stat(r, "unsymbolized_frames").value_or(-1) << " unsymbolized frames\n";
    auto listing = [](const std::map<std::string, long>& m) {
        std::vector<std::pair<long, std::string>> v;
        for (auto& [s, n] : m) v.push_back({n, s});
        std::sort(v.rbegin(), v.rend());
        std::string s;
        for (size_t i = 0; i < v.size() && i < 12; ++i)
            s += "  " + std::to_string(v[i].first) + "  " + v[i].second + "\n";
        return s.empty() ? "  (none)\n" : s;
    };
    if (!unknown.empty()) std::cout << "stacks with unnamed JIT frames:\n" << listing(unknown);

    // 5 s at 999 Hz of a process that is always runnable, but on the one scheduler it shares
    // with the loader and the code server, on 2 CPUs shared with the profiler (and other test
    // runs): 441 to 2400 samples seen. Far fewer would leave the bounds below without meaning.
    ASSERT_GE(all, 300) << describe(r);
    // The requirement itself: not one sample named from code that was not there. When this test
    // was written, 36 to 52% of the samples were named from the other version's layout (the
    // code index was re-read once a second, and guessed when each module came and went). Now
    // the walker's probe on __jit_debug_register_code times every load and purge exactly and
    // the index reads each new module at once. Not quite zero yet, and bounded here rather than
    // hidden (docs/architecture.md says so too): OTP 27 and later unregister purged code, and 0 or 1
    // sample in 1,500 was wrong per run. OTP 25 (and 26) only register, a purged module's end
    // is the next module registered over it, and about one load in a few thousand came with a
    // symfile header naming another base (cause not found): the code it hid was then named from
    // the version before, 0 to 0.33% of the worker's samples per run.
    const double wrong_allowed = vm().otp_release >= 27 ? 0.3 : 1.0;
    EXPECT_LE(pct(by_verdict[Verdict::Wrong], all), wrong_allowed) << "stacks naming code that was not there:\n"
                                                                   << listing(wrong);
    // Saying "unknown" is never wrong, but a profile of unknown frames is useless: 0 to 0.4% of
    // the worker's samples had an unnamed frame (a module purged and its memory reused before
    // its load event was read).
    EXPECT_LE(pct(by_verdict[Verdict::Unknown], all), 2.0) << "stacks with unnamed JIT frames:\n" << listing(unknown);
    // The versions alternate in pairs, each current about half of the time.
    EXPECT_GE(pct(by_verdict[Verdict::Alpha], all), 20.0) << r.out.substr(0, 4000);
    EXPECT_GE(pct(by_verdict[Verdict::Beta], all), 20.0) << r.out.substr(0, 4000);
    // The point of the test is that code moves under the profiler: it must have, often. The
    // loader aims at 100 loads a second and keeps it in a VM alone on the machine (102/s); with
    // the profiler and other test suites on the 2 CPUs, 41 to 100/s were seen. Above 25/s, each
    // of the two addresses the versions take turns at changes hands a dozen times a second.
    EXPECT_GE(loads, long(25 * seconds)) << erl.output();
}

}  // namespace reload_test
