// A VM that corrupts its own memory (issue 20), on every test VM: its NIF
// (tests/fixtures/hostile_mem_nif.c, workload tests/workloads/bb_hostile_mem.erl) writes lies
// where the profiler reads: a list whose first cell is its own tail, a tuple whose header claims
// 2^40 elements, Process structs whose heap pointers are out of order or point at no mapping,
// whose dictionary is at no mapping, whose message queue is a message that is its own next,
// whose current function is at no mapping, a registered name (also of the process being
// sampled) that is an atom past the atom table, and 10,000 executable mappings that are not
// JIT code. The victims wait in a receive no message
// ends, so the VM itself never reads what was corrupted. The test finds their Process structs
// by reading the process table (as the tools do); only the VM writes its memory.
// Every tool must end in its time, by itself, with exit code 0 or one clear error line, print no
// control byte, and say that what is corrupted is unreadable rather than print a wrong value.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "control_bytes.hpp"
#include "harness.hpp"
#include "target/vm.hpp"

#ifndef BB_HOSTILE_MEM_NIF
#error "BB_HOSTILE_MEM_NIF must name the built tests/fixtures/hostile_mem_nif.c"
#endif

namespace hostile_mem_test {

using namespace bbt;
namespace fs = std::filesystem;

// The Process of the process whose pid term is `pid` (masked as PidLayout::mask() says), by a
// scan of the process table.
uint64_t process_address(const bb::Vm& vm, uint64_t pid) {
    const uint64_t mask = vm.release().pids.mask();
    const bb::VmOffsets& o = vm.offsets();
    uint64_t ptab = vm.symbol_address("erts_proc");
    uint64_t tab = vm.mem().read<uint64_t>(ptab + o.ptab_tab).value_or(0);
    uint32_t max = vm.mem().read<uint32_t>(ptab + o.ptab_max).value_or(0);
    for (uint32_t ix = 0; tab && ix < max; ix++) {
        uint64_t p = vm.mem().read<uint64_t>(tab + 8ull * ix).value_or(0);
        auto id = p && !(p & 7) ? vm.mem().read<uint64_t>(p + o.proc_id) : std::nullopt;
        if (id && (*id & 0xf) == 0x3 && (*id & mask) == (pid & mask)) return p;
    }
    return 0;
}

class HostileMemTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, HostileMemTest, ::testing::ValuesIn(release_vms()), test_vm_name);

TEST_P(HostileMemTest, CorruptedMemoryIsUnreadableNotWrong) {
    const std::string dir = ::testing::TempDir() + "bb-hostile-mem-" + std::to_string(getpid());
    fs::create_directories(dir);
    fs::copy_file(BB_HOSTILE_MEM_NIF, dir + "/hostile_mem_nif.so", fs::copy_options::overwrite_existing);
    ErlVm erl(vm(), "bb_hostile_mem:main(\"" + dir + "/hostile_mem_nif\")");
    std::istringstream ready(erl.wait_line("ready"));
    std::string word, os_pid, spinner, self_cons, huge_tuple, heap_order, nowhere, bad_name, bad_dict, looped_queue;
    ready >> word >> os_pid >> spinner >> self_cons >> huge_tuple >> heap_order >> nowhere >> bad_name >> bad_dict >>
        looped_queue;
    ASSERT_FALSE(looped_queue.empty()) << erl.output();
    const std::string pid = std::to_string(erl.os_pid());

    // The corruptions, written by the VM's NIF at the addresses read here.
    {
        bb::Vm target = bb::Vm::attach(erl.os_pid());
        const bb::VmOffsets& o = target.offsets();
        auto poke = [&](uint64_t addr, uint64_t value) {
            erl.send_line("poke " + std::to_string(addr) + " " + std::to_string(value));
            erl.wait_line("poked");
        };
        auto proc = [&](const std::string& text) {
            auto term = target.parse_pid(text);
            uint64_t p = term ? process_address(target, *term) : 0;
            EXPECT_NE(p, 0u) << "no Process for " << text;
            return p;
        };
        auto field = [&](uint64_t p, uint32_t off) { return target.mem().read<uint64_t>(p + off).value_or(0); };
        // heap > hend: the order no process has.
        uint64_t p = proc(heap_order);
        uint64_t heap = field(p, o.proc_heap), hend = field(p, o.proc_hend);
        ASSERT_TRUE(p && heap && hend);
        poke(p + o.proc_heap, hend);
        poke(p + o.proc_hend, heap);
        // In order, but at an address nothing is mapped at (16 TiB, below any mmap base).
        p = proc(nowhere);
        ASSERT_NE(p, 0u);
        constexpr uint64_t kNowhere = 1ull << 44;
        poke(p + o.proc_heap, kNowhere);
        poke(p + o.proc_htop, kNowhere + 64);
        poke(p + o.proc_stop, kNowhere + 4096);
        poke(p + o.proc_hend, kNowhere + 8192);
        // Registered as atom index 2^26 - 1 (make_atom: index << 6 | 0xB), far past the table:
        // a RegProc of the NIF's whose every word is that atom.
        constexpr uint64_t kAtomPastTable = ((1ull << 26) - 1) << 6 | 0xb;
        erl.send_line("filled " + std::to_string(kAtomPastTable));
        const uint64_t regproc = std::stoull(erl.wait_line("filled").substr(7));
        for (const std::string& victim : {bad_name, spinner}) poke(proc(victim) + o.proc_reg, regproc);
        // The same one's current function (an ErtsCodeMFA pointer) and instruction pointer.
        poke(proc(bad_name) + o.proc_current, kNowhere);
        poke(proc(bad_name) + o.proc_i, kNowhere);
        // A dictionary where nothing is mapped.
        poke(proc(bad_dict) + o.proc_dictionary, kNowhere + 16384);
        // A queue of one signal whose next is itself: every word of it is its address, which
        // ends in 0x30, a signal's tag (ERTS_PROC_SIG_MAKE_TAG). The table walked it 10
        // million times (over 30 s) when the address happened to end so.
        erl.send_line("self_block 48");
        const uint64_t block = std::stoull(erl.wait_line("self_block").substr(11));
        poke(proc(looped_queue) + o.proc_sig_first, block);
        // The same block as its off-heap list: a node whose next is itself (not a binary: its
        // header word is its address), which the binaries' walk must end (it waits, so the VM
        // itself never walks that list before the test kills it).
        poke(proc(looped_queue) + o.proc_off_heap, block);
    }
    erl.send_line("exec_ranges 10000");
    EXPECT_EQ(erl.wait_line("exec_ranges"), "exec_ranges 10000");

    auto clean = [](const ToolResult& r, const std::string& what) {
        std::cout << "[          ] " << what << ": exit " << r.exit_code << " in " << r.seconds << " s\n";
        EXPECT_NE(r.exit_code, -1) << what << " was killed (a signal or its time ran out): " << describe(r);
        EXPECT_EQ(control_bytes_in(r.out), "") << what << " stdout";
        EXPECT_EQ(control_bytes_in(r.err), "") << what << " stderr";
    };
    auto ok = [&](const ToolResult& r, const std::string& what) {
        clean(r, what);
        EXPECT_EQ(r.exit_code, 0) << what << ": " << describe(r);
    };

    // The three BPF tools run at once, in the background, while procs runs (about 7 s less per VM).
    RunningTool sampling = start_tool("beam-bpf-sample", {"-d", "2", "--by-pid", "--folded", pid});
    RunningTool pstack = start_tool("beam-bpf-sample", {"--pstack", "-d", "1", pid});
    RunningTool blame = start_tool("beam-bpf-blame", {"-d", "1", "erts_garbage_collect", pid});

    // The table: the process whose heap pointers are out of order is unreadable, not listed.
    ToolResult table = run_tool("beam-bpf-procs", {"--all", "--json", pid}, 30s);
    ok(table, "procs --json");
    auto listed = nlohmann::json::parse(table.out);
    EXPECT_GE(listed["unreadable"], 1);
    // Those whose dictionary or queue does not read are listed, counted partial.
    EXPECT_GE(listed["partial"], 2);
    int listed_partial = 0;
    for (const auto& e : listed["processes"]) {
        EXPECT_NE(e["pid"], heap_order) << e.dump();
        listed_partial += e["pid"] == bad_dict || e["pid"] == looped_queue;
        if (e["pid"] == bad_name || e["pid"] == spinner) {
            EXPECT_EQ(e["name"], "erlang:apply/2") << e.dump();
        }
    }
    EXPECT_EQ(listed_partial, 2);
    ok(run_tool("beam-bpf-procs", {"--all", pid}, 30s), "procs");
    ToolResult binaries = run_tool("beam-bpf-procs", {"--binaries", "--all", "--json", pid}, 30s);
    ok(binaries, "procs --binaries");
    EXPECT_GE(nlohmann::json::parse(binaries.out)["partial"], 2) << binaries.out;
    // --stacks: the stack at no mapping is counted as unreadable, not shown; the process whose
    // resume address and current function point at no mapping resumes in "[unknown function]",
    // over the frames its stack does hold.
    ToolResult stacks = run_tool("beam-bpf-procs", {"--stacks", "--all", "--json", pid}, 30s);
    ok(stacks, "procs --stacks");
    ok(run_tool("beam-bpf-procs", {"--stacks", "--all", pid}, 30s), "procs --stacks (text)");
    const auto sj = nlohmann::json::parse(stacks.out);
    EXPECT_GE(sj["stack_unreadable"], 1) << stacks.out;
    bool unknown = false;
    for (const auto& g : sj["groups"])
        for (const auto& p : g["processes"]) {
            EXPECT_NE(p["pid"], nowhere) << g.dump();
            EXPECT_NE(p["pid"], heap_order) << g.dump();
            if (p["pid"] == bad_name) {
                unknown = true;
                EXPECT_EQ(g["frames"][0], "[unknown function]") << g.dump();
            }
        }
    EXPECT_TRUE(unknown) << "the process with its resume address at no mapping is in no group named\n" << stacks.out;
    // -e wall reads the same processes (every one of them each tick: --per-tick 100000): the stack
    // at no mapping is left out and counted, the one resuming at no mapping shown as unknown code,
    // the looped queue and the dictionary at no mapping are not read at all.
    ToolResult wall = run_tool("beam-bpf-sample",
                               {"-e", "wall", "-d", "1", "--per-tick", "100000", "--by-pid", "--folded", pid}, 30s);
    ok(wall, "sample -e wall");
    EXPECT_GE(stat(wall, "stack_unreadable").value_or(0), 1) << describe(wall);
    for (const auto& [stack, ns] : parse_folded(wall.out)) {
        EXPECT_EQ(stack.find(nowhere), std::string::npos) << stack;
        EXPECT_EQ(stack.find(heap_order), std::string::npos) << stack;
    }

    // --inspect: the terms that loop or lie are shown without a size, the rest as they are.
    ToolResult inspect = run_tool("beam-bpf-procs", {"--inspect", self_cons, "--json", pid}, 30s);
    ok(inspect, "procs --inspect (self-tailed list)");
    auto roots = nlohmann::json::parse(inspect.out)["roots"];
    ASSERT_EQ(roots.size(), 1u) << inspect.out;
    EXPECT_TRUE(roots[0]["words"].is_null()) << inspect.out;
    inspect = run_tool("beam-bpf-procs", {"--inspect", huge_tuple, "--json", pid}, 30s);
    ok(inspect, "procs --inspect (tuple of 2^40 elements)");
    roots = nlohmann::json::parse(inspect.out)["roots"];
    ASSERT_EQ(roots.size(), 1u) << inspect.out;
    EXPECT_TRUE(roots[0]["words"].is_null()) << inspect.out;
    EXPECT_FALSE(roots[0]["decoded"].get<bool>()) << inspect.out;
    ok(run_tool("beam-bpf-procs", {"--inspect", bad_name, pid}, 30s),
       "procs --inspect (registered name past the atom table)");
    // A Process that does not read is said to be so: neither "no such process" nor "busy".
    for (const auto& [victim, what] : {std::pair{heap_order, "heap pointers out of order"},
                                       {nowhere, "heap at no mapping"},
                                       {bad_dict, "dictionary at no mapping"},
                                       {looped_queue, "a queue that loops"}}) {
        ToolResult r = run_tool("beam-bpf-procs", {"--inspect", victim, pid}, 30s);
        clean(r, std::string("procs --inspect (") + what + ")");
        std::string line = expect_one_line_error(r, "beam-bpf-procs");
        EXPECT_NE(line.find("does not read"), std::string::npos) << what << ": " << line;
    }
    // Sampling: the spinner is sampled in its Erlang code (the JIT's ranges are found among the
    // 10,000 others), named by its initial call as an unregistered process is (its registered
    // name does not read).
    ToolResult sample = finish_tool(sampling, false, 60s);
    ok(sample, "sample --by-pid");
    long spin = 0;
    for (const auto& [stack, n] : parse_folded(sample.out)) {
        if (stack.find("bb_hostile_mem:spin/1") == std::string::npos) continue;
        spin += n;
        EXPECT_EQ(split_frames(stack).front(), "erlang:apply/2 " + spinner) << stack;
    }
    EXPECT_GT(spin, 0) << sample.out;
    EXPECT_GT(stat(sample, "records").value_or(0), 0);
    ok(finish_tool(pstack, false, 60s), "sample --pstack");
    // Without the VM's function names (the stripped 29) blame refuses in its one line.
    if (vm().functions_named) ok(finish_tool(blame, false, 60s), "blame");
    else clean(finish_tool(blame, false, 60s), "blame");

    erl.send_line("exec_ranges 0");  // the VM survived its own corruption
    EXPECT_EQ(erl.wait_line("exec_ranges"), "exec_ranges 0");
    std::error_code ec;
    fs::remove_all(dir, ec);
}

}  // namespace hostile_mem_test

namespace hostile_mem_test {

using namespace bbt;
namespace fs = std::filesystem;

size_t open_fds(pid_t pid) {
    std::error_code ec;
    size_t n = 0;
    for (auto it = fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
         !ec && it != fs::directory_iterator(); it.increment(ec))
        n++;
    return n;
}

// Threads started and ended all the time (by the NIF, through enif_thread_create: 64 at a time,
// 200 ms each, so each follow of the threads, every 500 ms, meets 64 new ones) while a sampler
// follows the VM's threads with one perf event each: the events of exited threads are closed, so
// the sampler's descriptors stay about the baseline plus the threads alive at once, and do not
// grow with the threads it has seen (with the events of exited threads kept open: 44 at attach,
// 220 after 704 threads). On Debian's OTP 25 only: following threads does not depend on the
// VM build.
class HostileThreadChurnTest : public RootTest {};

TEST_F(HostileThreadChurnTest, DescriptorsDoNotGrowWithThreadsSeen) {
    const std::string dir = ::testing::TempDir() + "bb-hostile-churn-" + std::to_string(getpid());
    fs::create_directories(dir);
    fs::copy_file(BB_HOSTILE_MEM_NIF, dir + "/hostile_mem_nif.so", fs::copy_options::overwrite_existing);
    ErlVm erl("bb_hostile_mem:main(\"" + dir + "/hostile_mem_nif\")");
    erl.wait_line("ready");
    const std::string pid = std::to_string(erl.os_pid());
    RunningTool tool = start_tool("beam-bpf-sample", {"-d", "8", "--folded", pid});
    std::string err;
    ASSERT_TRUE(wait_stderr(tool, "attached", 60s, &err)) << err;
    ASSERT_NE(err.find("per VM thread"), std::string::npos) << "not per-thread events: " << err;
    const size_t baseline = open_fds(tool.pid);
    erl.send_line("churn 64 200 5000");
    erl.wait_line("churning");
    size_t most = baseline;
    for (auto end = std::chrono::steady_clock::now() + 5500ms; std::chrono::steady_clock::now() < end;) {
        most = std::max(most, open_fds(tool.pid));
        std::this_thread::sleep_for(100ms);
    }
    const long started = std::stol(erl.wait_line("churned", 30s).substr(8));
    ToolResult r = finish_tool(tool, false, 60s);
    std::cout << "[          ] " << started << " threads started and ended; the sampler's descriptors: " << baseline
              << " at attach, at most " << most << " during the churn; exit " << r.exit_code << " in " << r.seconds
              << " s\n";
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_GT(started, 300);  // 1,600 on an idle machine, 704 at a load average of 8
    // 64 churned threads alive at a time, each with its event, and some slack for the rest.
    EXPECT_LE(most, baseline + 64 + 64) << started << " threads";
    EXPECT_GT(stat(r, "records").value_or(0), 0);
    std::error_code ec;
    fs::remove_all(dir, ec);
}

}  // namespace hostile_mem_test
