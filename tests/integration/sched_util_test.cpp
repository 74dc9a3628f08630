// beam-bpf-procs --watch's scheduler utilization against the VM's own
// statistics(scheduler_wall_time_all) over the same interval, at 10%, 50% and 95% load
// (tests/workloads/bb_util.erl: one worker bound to each of 2 schedulers, busy a share of
// every 20 ms), on OTP 25, 27 and 29.
#include <cmath>
#include <map>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness.hpp"

namespace {

using namespace bbt;

// `mark ID:ACTIVE:TOTAL ...` as ID -> (active, total).
std::map<int, std::pair<double, double>> mark(ErlVm& erl) {
    erl.send_line("mark");
    std::istringstream in(erl.wait_line("mark", 30s));
    std::string word;
    in >> word;
    std::map<int, std::pair<double, double>> out;
    while (in >> word) {
        int id = 0;
        double active = 0, total = 0;
        char c1 = 0, c2 = 0;
        std::istringstream w(word);
        w >> id >> c1 >> active >> c2 >> total;
        out[id] = {active, total};
    }
    return out;
}

class SchedUtilVmTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, SchedUtilVmTest, ::testing::ValuesIn(release_vms()), test_vm_name);

TEST_P(SchedUtilVmTest, BusyAgreesWithSchedulerWallTime) {
    ErlVm erl(vm(), "bb_util:main()", {"+S", "2"});
    std::istringstream ready(erl.wait_line("ready", 60s));
    std::string word;
    int normal = 0;
    ready >> word >> normal;
    ASSERT_EQ(normal, 2);
    for (int busy_ms : {2, 10, 19}) {
        erl.send_line("load " + std::to_string(busy_ms));
        erl.wait_line("load");
        std::this_thread::sleep_for(1s);
        RunningTool t = start_tool("beam-bpf-procs",
                                   {"--watch", "4", "--count", "1", "--json", "-t", "1", std::to_string(erl.os_pid())});
        const auto before = mark(erl);
        ToolResult r = finish_tool(t, false, 60s);
        const auto after = mark(erl);
        ASSERT_EQ(r.exit_code, 0) << describe(r);
        const auto j = nlohmann::json::parse(r.out);
        int compared = 0;
        for (const auto& s : j["schedulers"]) {
            // The VM numbers normal schedulers 1..N, then dirty CPU, then dirty IO ones.
            const std::string type = s["type"];
            if (type != "normal") continue;
            const int id = s["no"];
            const double da = after.at(id).first - before.at(id).first, dt = after.at(id).second - before.at(id).second;
            ASSERT_GT(dt, 0);
            const double vm_busy = da / dt, tool_busy = s["busy"], n = s["samples"];
            const double sd = std::sqrt(std::max(vm_busy * (1 - vm_busy), 0.01) / n);
            std::cout << "[          ] " << vm().name << " load " << 100 * busy_ms / 20 << "%: scheduler " << id
                      << " tool " << 100 * tool_busy << "% (" << n << " samples), VM " << 100 * vm_busy << "%\n";
            EXPECT_LE(3 * sd, 0.03) << "too few samples for a 3-point tolerance";
            EXPECT_NEAR(tool_busy, vm_busy, 0.03) << "scheduler " << id << " at " << busy_ms << " ms of 20";
            compared++;
        }
        EXPECT_EQ(compared, 2) << r.out;
        // Dirty schedulers: read from their own counters, idle here.
        for (const auto& s : j["schedulers"])
            if (s["type"] != "normal") EXPECT_LT(s["busy"].get<double>(), 0.03) << s.dump();
    }
}

}  // namespace
