// beam-bpf-procs against the VM's own erlang:process_info/2, on every test VM: processes with
// known contents (a 10,000-message queue, a 1 MiB heap, a large refc binary, an Elixir name),
// all waiting, asked by the VM just before and just after the tool reads them from outside.
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness.hpp"

namespace {

using namespace bbt;

const std::string kTool = "beam-bpf-procs";

using Info = std::map<std::string, std::string>;  // key -> value, "pid" too

// `pinfo <pid> key=value ...` lines up to `pinfo_end <process count>`.
std::map<std::string, Info> read_info(ErlVm& vm, long* process_count) {
    std::map<std::string, Info> out;
    for (;;) {
        std::string line = vm.wait_line("pinfo");
        std::istringstream in(line);
        std::string word, pid;
        in >> word;
        if (word == "pinfo_end") {
            in >> *process_count;
            return out;
        }
        in >> pid;
        Info& i = out[pid];
        while (in >> word) {
            auto eq = word.find('=');
            i[word.substr(0, eq)] = word.substr(eq + 1);
        }
    }
}

class ProcsVmTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, ProcsVmTest, ::testing::ValuesIn(test_vms()), test_vm_name);

TEST_P(ProcsVmTest, AgreesWithProcessInfo) {
    ErlVm erl(vm(), "bb_work:main(procs)");
    std::istringstream ready(erl.wait_line("ready"));
    std::string word, pids[4];
    ready >> word >> pids[0] >> pids[1] >> pids[2] >> pids[3];
    ASSERT_TRUE(pids[3].starts_with("<")) << erl.output();

    long count_before = 0, count_after = 0;
    erl.send_line("info");
    auto before = read_info(erl, &count_before);
    ToolResult r = run_tool(kTool, {"--json", "--all", std::to_string(erl.os_pid())}, 60s);
    erl.send_line("info");
    auto after = read_info(erl, &count_after);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["unreadable"], 0);
    long listed = j["processes_total"];
    EXPECT_GE(listed, std::min(count_before, count_after));
    EXPECT_LE(listed, std::max(count_before, count_after));

    std::map<std::string, nlohmann::json> tool;
    for (const auto& p : j["processes"]) tool[p["pid"]] = p;
    const std::string names[4] = {"bb_queue", "bb_big_heap", "bb_refc", "BbProcs.Worker"};
    for (int k = 0; k < 4; k++) {
        SCOPED_TRACE(names[k] + " " + pids[k]);
        ASSERT_TRUE(tool.count(pids[k])) << r.out;
        const auto& t = tool[pids[k]];
        Info& b = before[pids[k]];
        Info& a = after[pids[k]];
        EXPECT_EQ(t["name"], names[k]);
        EXPECT_EQ(t["status"], b["status"]);
        EXPECT_EQ(t["current_function"], b["current"]);
        // Each figure as process_info gave it before and after the tool read it.
        auto between = [&](const char* field, const char* key) {
            long v = t[field], lo = std::stol(b[key]), hi = std::stol(a[key]);
            EXPECT_GE(v, std::min(lo, hi)) << field;
            EXPECT_LE(v, std::max(lo, hi)) << field;
        };
        between("message_queue_len", "msgq");
        between("heap_size", "heap");
        between("stack_size", "stack");
        between("reductions", "reds");
        if (k != 0) {  // no messages, links or monitors: nothing outside the heaps
            between("total_heap_size", "total_heap");
            between("memory", "memory");
        }
    }
    EXPECT_EQ(tool[pids[0]]["message_queue_len"], 10000);
    EXPECT_GT(tool[pids[1]]["total_heap_size"], 131072);  // 65,536 cons cells

    // The table, by total heap size (HEAP, the third column), largest first; the big heap is
    // in the top three (the workload's main process built the same list).
    ToolResult table = run_tool(kTool, {"--sort", "heap", "-t", "3", std::to_string(erl.os_pid())}, 60s);
    ASSERT_EQ(table.exit_code, 0) << describe(table);
    auto lines = lines_of(table.out);
    ASSERT_EQ(lines.size(), 5u) << table.out;  // summary, header, three rows
    long last = -1;
    bool big = false;
    for (size_t i = 2; i < lines.size(); i++) {
        std::istringstream row(lines[i]);
        std::string pid, memory, unit;
        long heap;
        row >> pid >> memory >> unit >> heap;
        if (last >= 0) {
            EXPECT_LE(heap, last) << table.out;
        }
        last = heap;
        big |= pid == pids[1] && lines[i].find("bb_big_heap") != std::string::npos;
    }
    EXPECT_TRUE(big) << table.out;

    std::string line = expect_one_line_error(run_tool(kTool, {"--sort", "size", std::to_string(erl.os_pid())}, 30s), kTool);
    EXPECT_NE(line.find("--sort size: the orders are"), std::string::npos) << line;
}

}  // namespace
