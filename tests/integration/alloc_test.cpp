// beam-bpf-sample -e alloc on every test VM, against what is known of the workload
// (tests/workloads/bb_alloc.erl): three functions with the same arithmetic allocating 3:1:0
// words by construction; the VM's own garbage_collection trace of the same process over the
// same run (the words allocated before each collection); and, on OTP 27, tprof's call_memory
// tracing of the same work. Then periodic work (tests/workloads/bb_alloc_mix.erl), where the
// heap fills at the same phase every time: a sweep of take(T)/give(G)/idle over sizes and stack
// depths, six functions allocating in ratios drawn at random, and two processes of very unequal
// epochs without --process.
#include <signal.h>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <sstream>

#include "harness.hpp"

namespace alloc_test {

using namespace bbt;

const std::string kTool = "beam-bpf-sample";
const std::string kThree = "bb_alloc:alloc_three/2", kOne = "bb_alloc:alloc_one/2", kNone = "bb_alloc:alloc_none/2";

// Samples enough that `points` is 3 standard deviations of a share near `p` percent.
long samples_for(double p, double points) {
    double q = p / 100, sigma = points / 3 / 100;
    return static_cast<long>(q * (1 - q) / (sigma * sigma)) + 1;
}

class AllocVmTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, AllocVmTest, ::testing::ValuesIn(probe_vms()), test_vm_name);

// Per function: the share of the folded stacks' weight with it as the leaf (self), in percent.
std::map<std::string, double> self_shares(const std::string& folded) {
    std::map<std::string, double> self;
    double all = 0;
    for (const auto& [stack, n] : parse_folded(folded)) {
        all += n;
        self[stack.substr(stack.rfind(';') + 1)] += n;
    }
    for (auto& [f, v] : self) v = all ? 100.0 * v / all : 0;
    return self;
}

// One burst of the workload while the tool runs: `command` (go N, cpu N) until the line that
// ends it; returns the tool's result and that line.
std::pair<ToolResult, std::string> burst(ErlVm& erl, std::vector<std::string> args, const std::string& command,
                                         const std::string& done) {
    RunningTool t = start_tool(kTool, args);
    std::string err;
    EXPECT_TRUE(wait_stderr(t, ": attached to ", 30s, &err)) << err;
    erl.send_line(command);
    std::string line = erl.wait_line(done, 120s);
    return {finish_tool(t, true, 30s), line};
}

TEST_P(AllocVmTest, SharesAndTotalsAgreeWithTheVm) {
    ErlVm erl(vm(), "bb_alloc:main()");
    std::istringstream ready(erl.wait_line("ready"));
    std::string word, worker;
    ready >> word >> worker;
    const std::string stats = ::testing::TempDir() + "/alloc-stats.json", prefix = ::testing::TempDir() + "/alloc";
    // --period 256: a sample in every epoch of its small heaps (one sample per epoch at most):
    // about 3,500 samples from the 1,920,000 words of 120 rounds.
    auto [r, trace] = burst(erl,
                            {"-e", "alloc", "--watchpoints-in-vm", "--period", "256", "--process", worker, "--format",
                             "folded,pprof,top", "-t", "1000", "-o", prefix, "--stats", stats,
                             std::to_string(erl.os_pid())},
                            "go 120", "gc_words");
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::istringstream tl(trace);
    long trace_words = 0, gcs = 0;
    tl >> word >> trace_words >> word >> gcs;
    nlohmann::json st = nlohmann::json::parse(std::ifstream(stats));
    const long words = st["alloc_words"].get<long>() + st["message_words"].get<long>();
    std::cout << "[          ] " << vm().name << ": -e alloc " << words << " words (" << st["alloc_words"]
              << " on stacks, " << st["message_words"] << " apart) over " << st["records"]
              << " GC entries; the VM's garbage_collection trace: " << trace_words << " words over " << gcs
              << " collections\n";

    // The totals: within 5% of what the VM's trace says was allocated before its collections.
    ASSERT_GT(trace_words, 1'000'000) << erl.output();  // 120 rounds of 16,000 words
    EXPECT_NEAR(static_cast<double>(words), static_cast<double>(trace_words), 0.05 * trace_words);

    // The shares: 3:1 by construction, and never the function that allocates nothing, from
    // samples enough for a 3-point tolerance.
    EXPECT_GE(st["alloc_samples"].get<long>(), samples_for(75, 3)) << st.dump();
    std::stringstream folded;
    folded << std::ifstream(prefix + ".folded").rdbuf();
    auto self = self_shares(folded.str());
    std::cout << "[          ] shares of words: " << kThree << " " << self[kThree] << "%, " << kOne << " " << self[kOne]
              << "%\n";
    EXPECT_NEAR(self[kThree], 75.0, 3.0) << folded.str();
    EXPECT_NEAR(self[kOne], 25.0, 3.0) << folded.str();
    // The function that allocates nothing: its stack frames are written into the same block as
    // the heap, below the watched word when the stack reaches it, and such writes end the watch
    // (BB_WATCH_STACK) instead of a sample.
    std::cout << "[          ] " << kNone << ": " << self[kNone] << "% of words\n";
    EXPECT_LT(self[kNone], 0.5) << folded.str();
    // The same run as pprof (alloc_space in bytes) and as the top table, read by go tool pprof.
    ToolResult check = run_command({"/usr/bin/python3", std::string(BB_SOURCE_DIR) + "/tests/consumers/check_pprof.py",
                                    prefix + ".pb.gz", "--folded", prefix + ".folded", "--top", prefix + ".txt"});
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;

    // The CPU profile of the same work: the three about even (the same arithmetic), so the
    // allocation profile is not the CPU profile under another name. 300 rounds, about 1,200
    // samples: with 60 (about 240) one sanitized run read 42.7 / 28.2 / 29.0, 3 standard
    // deviations of sampling noise off.
    auto [cpu, _] = burst(erl, {"--process", worker, "--folded", std::to_string(erl.os_pid())}, "cpu 300", "cpu_done");
    ASSERT_EQ(cpu.exit_code, 0) << describe(cpu);
    std::map<std::string, double> total;
    double all = 0;
    for (const auto& [stack, n] : parse_folded(cpu.out)) {
        all += n;
        for (const auto& f : {kThree, kOne, kNone})
            if (stack.find(f) != std::string::npos) total[f] += n;
    }
    for (auto& [f, v] : total) v = 100.0 * v / all;
    std::cout << "[          ] CPU: " << total[kThree] << "% / " << total[kOne] << "% / " << total[kNone] << "%\n";
    EXPECT_NEAR(total[kThree], total[kOne], 10.0) << cpu.out;
    EXPECT_GT(total[kNone], 20.0) << cpu.out;
}

// --- periodic work -------------------------------------------------------------------------
// On two builds (OTP 25's, OTP 27's lock-counting one with frame pointers): each VM's sweep
// takes 30 s, and the watchpoints' method does not differ between builds.
std::vector<TestVm> mix_vms() {
    auto vms = test_vms();
    std::erase_if(vms, [](const TestVm& v) { return v.name != "otp25" && v.name != "otp27_lcnt_fp"; });
    return vms;
}
class AllocMixTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, AllocMixTest, ::testing::ValuesIn(mix_vms()), test_vm_name);

// One run of a bb_alloc_mix worker under -e alloc (--process: its samples only): the self
// shares of its words per leaf function, and the watchpoints' samples behind them.
struct MixRun {
    std::map<std::string, double> self;
    long samples = 0;
    std::string folded, stats, err;
};

// `spawn`: the command that spawns the worker, empty if it was sent already. `pair`: with an
// entry and a return probe per GC entry point, as where the kernel has no uprobe sessions.
MixRun mix_run(ErlVm& erl, const std::string& spawn, int ms, int period = 256, bool pair = false) {
    if (!spawn.empty()) erl.send_line(spawn);
    std::string name;
    std::istringstream(erl.wait_line("spawned", 30s)) >> name >> name;
    const std::string stats = ::testing::TempDir() + "/alloc-mix-stats.json";
    // --period 256: every epoch of these heaps (987 words and up) is a candidate, for samples
    // enough in seconds; each sample then stands for its epoch's free words.
    if (pair) setenv("BB_NO_UPROBE_SESSION", "1", 1);
    RunningTool t = start_tool(kTool, {"-e", "alloc", "--watchpoints-in-vm", "--period", std::to_string(period),
                                       "--process", name, "--folded", "--stats", stats, std::to_string(erl.os_pid())});
    unsetenv("BB_NO_UPROBE_SESSION");
    std::string err;
    EXPECT_TRUE(wait_stderr(t, "beam-bpf-sample: attached", 30s, &err)) << err;
    erl.send_line("go " + std::to_string(ms));
    erl.wait_line("done", 120s);
    ToolResult r = finish_tool(t, true, 30s);
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    MixRun m;
    m.folded = r.out;
    m.err = r.err;
    m.self = self_shares(r.out);
    std::stringstream st;
    st << std::ifstream(stats).rdbuf();
    m.stats = st.str();
    nlohmann::json j = nlohmann::json::parse(m.stats, nullptr, false);
    if (!j.is_discarded() && j.contains("alloc_samples")) m.samples = j["alloc_samples"].get<long>();
    return m;
}

const std::string kTake = "bb_alloc_mix:take/2", kGive = "bb_alloc_mix:give/2", kIdle = "bb_alloc_mix:idle/2";

// take(T)/give(G)/idle with T = 3G: 75% / 25% / 0 of the words, whatever the sizes, the stack
// depth, or the phase at which the heap fills. Charged at GC entries (-e alloc-gc) the same
// work read 100/0 at 2400/800 and 300/100, 0/100 or 80.9 elsewhere (docs/validation.md,
// the take/give sweep).
TEST_P(AllocMixTest, PeriodicWorkSweep) {
    ErlVm erl(vm(), "bb_alloc_mix:main()");
    erl.wait_line("ready");
    const long need = samples_for(75, 3);  // 1,876
    struct Pair {
        int t, g, depth;
    };
    for (Pair p : {Pair{3000, 1000, 0}, Pair{3001, 1000, 0}, Pair{2400, 800, 0}, Pair{6000, 2000, 0}, Pair{300, 100, 0},
                   Pair{9000, 3000, 0}, Pair{2400, 800, 8}, Pair{300, 100, 30}}) {
        // About 6 samples a ms (11,400 to 17,100 in 2 s in CI): 1 s gives three times `need`.
        // Sized by the samples, not the seconds: a clean-clone run here armed fewer watchpoints
        // a second (1,057 to 6,296 samples in 1 s, 388 flips late), so a run short of `need` is
        // run again for twice as long, up to 4 s.
        MixRun m;
        int ms = 1000;
        for (;; ms *= 2) {
            m = mix_run(erl, fmt::format("mix {} {} {}", p.t, p.g, p.depth), ms);
            if (m.samples >= need || ms >= 4000) break;
        }
        std::cout << "[          ] " << vm().name << ": take(" << p.t << ")/give(" << p.g << ") " << p.depth
                  << " deep: take " << m.self[kTake] << "%, give " << m.self[kGive] << "%, idle " << m.self[kIdle]
                  << "% from " << m.samples << " samples in " << ms << " ms\n";
        EXPECT_GE(m.samples, need) << "too few samples for a 3-point tolerance\n" << m.stats;
        double truth = 100.0 * p.t / (p.t + p.g);
        EXPECT_NEAR(m.self[kTake], truth, 3.0) << m.folded;
        EXPECT_NEAR(m.self[kGive], 100 - truth, 3.0) << m.folded;
        EXPECT_EQ(m.self[kIdle], 0.0) << m.folded;
    }
}

// Six functions whose words per round are drawn at random (the seed is printed): each within 3
// points of its share by construction.
TEST_P(AllocMixTest, RandomRatios) {
    ErlVm erl(vm(), "bb_alloc_mix:main()");
    erl.wait_line("ready");
    const unsigned seed = std::random_device{}();
    std::cout << "[          ] " << vm().name << ": seed " << seed << "\n";
    erl.send_line("rand " + std::to_string(seed));
    std::istringstream truth_line(erl.wait_line("rand_truth", 30s));
    std::string word;
    truth_line >> word;
    std::map<std::string, double> truth;
    double all = 0;
    for (std::string f; truth_line >> f;) {
        long n = 0;
        truth_line >> n;
        truth["bb_alloc_mix:" + f + "/2"] = n;
        all += n;
    }
    ASSERT_EQ(truth.size(), 6u);
    MixRun m = mix_run(erl, "", 4000);
    double widest = 0;
    for (auto& [f, v] : truth) {
        v = 100 * v / all;
        widest = std::max(widest, std::min(v, 50.0));
    }
    EXPECT_GE(m.samples, samples_for(widest, 3)) << "too few samples for a 3-point tolerance\n" << m.stats;
    for (const auto& [f, v] : truth) {
        std::cout << "[          ] " << f << ": " << m.self[f] << "% (truth " << v << "%)\n";
        EXPECT_NEAR(m.self[f], v, 3.0) << "seed " << seed << "\n" << m.folded;
    }
}

// At a period past twice the young heap, a uprobe session's entry lets a collection return
// without a trap unless its flip can win (bpf/alloc_watch.bpf.h, watch_gc_session_entry): the
// shares are the same as with a return probe on every collection, which kernels without sessions
// get.
TEST_P(AllocMixTest, SessionsAndReturnProbesAgreeAtALongerPeriod) {
    ErlVm erl(vm(), "bb_alloc_mix:main()");
    erl.wait_line("ready");
    const long need = samples_for(75, 3);
    for (bool pair : {false, true}) {
        // 9,500 to 11,100 samples in 2 s in CI: 1 s gives more than twice `need`.
        MixRun m = mix_run(erl, pair ? "mix 6000 2000 0" : "mix 3000 1000 0", 1000, 8192, pair);
        const bool sessions = m.err.find("uprobe sessions") != std::string::npos;
        std::cout << "[          ] " << vm().name << ": --period 8192, "
                  << (pair       ? "entry and return probes"
                      : sessions ? "uprobe sessions"
                                 : "no uprobe sessions here")
                  << ": take " << m.self[kTake] << "%, give " << m.self[kGive] << "% from " << m.samples
                  << " samples\n";
        EXPECT_FALSE(pair && sessions) << m.err;
        EXPECT_GE(m.samples, need) << "too few samples for a 3-point tolerance\n" << m.stats;
        EXPECT_NEAR(m.self[kTake], 75.0, 3.0) << m.folded;
        EXPECT_NEAR(m.self[kGive], 25.0, 3.0) << m.folded;
        EXPECT_EQ(m.self[kIdle], 0.0) << m.folded;
    }
}

// Without --process, every process of the VM competes for the one watch: which of a process's
// epochs lose does not depend on its code, but how many do. Two processes whose collections come
// at rates a thousandfold apart (bb_alloc_mix `pair`): one of the default heap, one of 150,000
// words, whose collections run on a dirty scheduler. Each heap's samples are scaled to its exact
// words (profile/alloc_strata.hpp): each function within 3 points of the words it built, at the
// default period, and the profile's words add up to the exact total. Before (cecd867):
// short_take 67.5% (truth 45.3), long_take 0 (truth 41.0): a dirty collection's session entry
// bounded the flip by the small heap the process was given meanwhile.
TEST_P(AllocMixTest, ProcessesOfUnequalEpochsWithoutProcess) {
    ErlVm erl(vm(), "bb_alloc_mix:main()");
    erl.wait_line("ready");
    const std::string stats = ::testing::TempDir() + "/alloc-pair-stats.json";
    auto [r, line] = burst(erl,
                           {"-e", "alloc", "--watchpoints-in-vm", "--folded", "--stats", stats,
                            std::to_string(erl.os_pid())},
                           "pair 10000", "pair_words");
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::istringstream words(line);
    std::string tag, short_pid, long_pid;
    double built[3] = {};
    words >> tag >> built[0] >> built[1] >> built[2] >> short_pid >> long_pid;
    const std::string funs[3] = {"bb_alloc_mix:short_take/2", "bb_alloc_mix:long_take/2", "bb_alloc_mix:long_give/2"};
    std::map<std::string, double> self;
    double all = 0, measured = 0;
    for (const auto& [stack, n] : parse_folded(r.out)) {
        all += n;
        self[stack.substr(stack.rfind(';') + 1)] += n;
    }
    for (const auto& f : funs) measured += self[f];
    nlohmann::json j = nlohmann::json::parse(std::ifstream(stats), nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    const double exact = j["alloc_words"].get<double>();
    const double truth_all = built[0] + built[1] + built[2];
    ASSERT_GT(truth_all, 0) << line;
    // Each process's words are exact; the split of the long one's between long_take and
    // long_give rests on its own samples (one per epoch at most: it loses most of them to the
    // other's watches). Enough of them that 3 points is 3 standard deviations of long_give's
    // share of all, L x g with g its share of the long process's words.
    const double big = (built[1] + built[2]) / truth_all, g = built[2] / (built[1] + built[2]);
    const long long_samples = j["alloc_samples_by_heap"].value(long_pid, 0L);
    const long need = static_cast<long>(big * big * g * (1 - g) / (0.01 * 0.01)) + 1;
    std::cout << "[          ] " << vm().name << ": " << j["alloc_samples"] << " samples, " << long_samples << " of "
              << long_pid << " (" << need << " needed), " << all << " words in the profile, " << exact << " exact\n";
    EXPECT_GE(long_samples, need) << j.dump();
    EXPECT_NEAR(all / exact, 1.0, 0.02) << j.dump();
    for (int i = 0; i < 3; i++) {
        const double got = 100 * self[funs[i]] / measured, truth = 100 * built[i] / truth_all;
        std::cout << "[          ] " << funs[i] << ": " << got << "% (truth " << truth << "%)\n";
        EXPECT_NEAR(got, truth, 3.0) << r.out;
    }
}

// Servers allocate mostly in processes that live a few milliseconds or less. Thousands of
// processes a second, each building a list of 1,000 cells in short_lived/2 and ending, beside one
// long process building 300 cells in steady/2 and computing (bb_alloc_mix `spawners`), none
// registered: each function's share of the profile within 3 points of the words it built, as the
// workload counts them, and at most 10% of the words unattributed (--period 8192: samples enough
// for 3 points to be 3 standard deviations on the slowest build). Before
// small heaps were pooled by kind (profile/alloc_strata.hpp): 81.8% "[allocation not sampled]",
// short_lived/2 2.1% where it built 84.8%. On OTP 25, 27 and 29.
std::vector<TestVm> short_lived_vms() {
    auto vms = test_vms();
    std::erase_if(vms,
                  [](const TestVm& v) { return v.name != "otp25" && v.name != "otp27" && v.name != "otp29_dwarf_fp"; });
    return vms;
}
class AllocShortLivedTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, AllocShortLivedTest, ::testing::ValuesIn(short_lived_vms()), test_vm_name);

TEST_P(AllocShortLivedTest, ShortLivedProcessesAreAttributed) {
    ErlVm erl(vm(), "bb_alloc_mix:main()");
    erl.wait_line("ready");
    const std::string stats = ::testing::TempDir() + "/alloc-spawners-stats.json";
    auto [r, line] = burst(erl,
                           {"-e", "alloc", "--watchpoints-in-vm", "--period", "8192", "--folded", "--stats", stats,
                            std::to_string(erl.os_pid())},
                           "spawners 8000", "spawners_words");
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::istringstream words(line);
    std::string tag;
    double built[2] = {}, spawned = 0;
    words >> tag >> built[0] >> built[1] >> spawned;
    ASSERT_GT(built[0] + built[1], 0) << line;
    const std::string funs[2] = {"bb_alloc_mix:short_lived/2", "bb_alloc_mix:steady/2"};
    std::map<std::string, double> self;
    double all = 0;
    for (const auto& [stack, n] : parse_folded(r.out)) {
        all += n;
        self[stack.substr(stack.rfind(';') + 1)] += n;
    }
    ASSERT_GT(all, 0) << r.out;
    nlohmann::json j = nlohmann::json::parse(std::ifstream(stats), nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    const double exact = j["alloc_words"].get<double>(), samples = j["alloc_samples"].get<double>();
    const double unattributed = 100 * self["[allocation not sampled]"] / all;
    std::cout << "[          ] " << vm().name << ": " << spawned << " processes spawned, " << samples << " samples, "
              << all << " words in the profile, " << exact << " exact; " << unattributed << "% unattributed\n";
    EXPECT_LE(unattributed, 10.0) << r.out;
    EXPECT_NEAR(all / exact, 1.0, 0.02) << j.dump();
    EXPECT_GE(spawned, 5000) << line;  // thousands a second, even on a loaded machine
    // Shares of the two functions' words: each sample stands for a period's words, and the
    // split rests on the samples (the long process's words are exact, the pool's too). Enough
    // samples that 3 points is 3 standard deviations of the larger share.
    const double p = built[0] / (built[0] + built[1]);
    EXPECT_GE(samples, p * (1 - p) / (0.01 * 0.01)) << j.dump();
    for (int i = 0; i < 2; i++) {
        const double got = 100 * self[funs[i]] / (self[funs[0]] + self[funs[1]]),
                     truth = 100 * built[i] / (built[0] + built[1]);
        std::cout << "[          ] " << funs[i] << ": " << got << "% (truth " << truth << "%), "
                  << 100 * self[funs[i]] / all << "% of the profile\n";
        EXPECT_NEAR(got, truth, 3.0) << r.out;
    }
}

// OTP 27's tprof (call_memory tracing: exact words per function, no stacks) on the same work,
// on the test VMs that have it.
std::vector<TestVm> vms_with_tprof() {
    auto vms = probe_vms();
    std::erase_if(vms, [](const TestVm& v) { return v.otp_release < 27; });
    return vms;
}
class TprofVmTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, TprofVmTest, ::testing::ValuesIn(vms_with_tprof()), test_vm_name);

TEST_P(TprofVmTest, SharesAgreeWithTprof) {
    ErlVm erl(vm(), "bb_alloc:main()");
    std::istringstream ready(erl.wait_line("ready"));
    std::string word, worker;
    ready >> word >> worker;
    const std::string stats = ::testing::TempDir() + "/alloc-tprof-stats.json";
    auto [r, trace] = burst(erl,
                            {"-e", "alloc", "--watchpoints-in-vm", "--period", "256", "--process", worker, "--folded",
                             "--stats", stats, std::to_string(erl.os_pid())},
                            "go 120", "gc_words");
    EXPECT_GE(nlohmann::json::parse(std::ifstream(stats))["alloc_samples"].get<long>(), samples_for(75, 3));
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    auto ours = self_shares(r.out);

    erl.send_line("tprof 30");
    std::map<std::string, double> tprof;
    double all = 0;
    for (;;) {
        std::istringstream in(erl.wait_line("tprof", 120s));
        std::string tag, fn;
        long words = 0;
        in >> tag >> fn >> words;
        if (tag == "tprof_end") break;
        tprof[fn] = words;
        all += words;
    }
    ASSERT_GT(all, 0) << erl.output();
    for (auto& [f, v] : tprof) v = 100.0 * v / all;
    std::cout << "[          ] tprof call_memory: " << tprof[kThree] << "% / " << tprof[kOne]
              << "%; -e alloc: " << ours[kThree] << "% / " << ours[kOne] << "%\n";
    for (const auto& f : {kThree, kOne}) EXPECT_NEAR(ours[f], tprof[f], 3.0) << f << "\n" << r.out;
}

TEST(AllocErrors, OneLine) {
    ErlVm erl("bb_work:main(idle)");
    erl.wait_line("ready");
    std::string line = expect_one_line_error(run_tool(kTool, {"-e", "alloc", "--pstack", std::to_string(erl.os_pid())},
                                                      30s),
                                             kTool);
    EXPECT_NE(line.find("not with -e alloc"), std::string::npos) << line;
    line = expect_one_line_error(run_tool("beam-bpf-blame",
                                          {"-e", "alloc", "erts_garbage_collect", std::to_string(erl.os_pid())}, 30s),
                                 "beam-bpf-blame");
    EXPECT_NE(line.find("-e alloc is beam-bpf-sample's"), std::string::npos) << line;
    line = expect_one_line_error(run_tool(kTool, {"--watchpoints-in-vm", "-d", "1", std::to_string(erl.os_pid())}, 30s),
                                 kTool);
    EXPECT_NE(line.find("only with -e alloc"), std::string::npos) << line;
}

// In a virtual machine a watchpoint's trap can reach the VM as a SIGTRAP that kills it
// (sampling/alloc_watch.hpp): -e alloc is refused there without --watchpoints-in-vm, in one line
// and before any watchpoint is opened, and the VM lives on. On bare metal it runs.
TEST(AllocErrors, VirtualMachinesNeedTheirFlag) {
    const bool vm_host = (" " + read_file("/proc/cpuinfo")).find(" hypervisor") != std::string::npos;
    ErlVm erl("bb_work:main(idle)");
    erl.wait_line("ready");
    ToolResult r = run_tool(kTool, {"-e", "alloc", "-d", "1", "--folded", std::to_string(erl.os_pid())}, 60s);
    if (vm_host) {
        std::string line = expect_one_line_error(r, kTool);
        EXPECT_NE(line.find("virtual machine"), std::string::npos) << line;
        EXPECT_NE(line.find("--watchpoints-in-vm"), std::string::npos) << line;
    } else {
        EXPECT_EQ(r.exit_code, 0) << describe(r);
    }
    EXPECT_EQ(kill(erl.os_pid(), 0), 0) << "the VM is gone";
}

}  // namespace alloc_test
