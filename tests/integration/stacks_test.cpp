// beam-bpf-procs --stacks against the VM's own process_info(P, [status, current_stacktrace]) of
// the same processes, on every test VM: 100 processes in a bare receive, 50 clients blocked in
// gen_server:call/3 to a server asleep in its handle_call/3, a stack deeper than the tool reads,
// and busy loops (tests/workloads/bb_stacks.erl). The blocked ones do not move: the VM says
// where they are just before the tool reads them, and again just after.
#include <algorithm>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "control_bytes.hpp"
#include "harness.hpp"

namespace stacks_test {

using namespace bbt;

const std::string kTool = "beam-bpf-procs";

struct Seen {
    std::string kind, status;
    std::vector<std::string> top;  // the first two functions of current_stacktrace
    bool operator==(const Seen&) const = default;
};

// `stack <kind> <pid> <status> <f1> <f2>` lines up to `stacks_end`, by pid.
std::map<std::string, Seen> vm_stacks(ErlVm& erl) {
    erl.send_line("stacks");
    std::map<std::string, Seen> out;
    for (;;) {
        std::istringstream in(erl.wait_line("stack"));
        std::string word, pid, f;
        in >> word;
        if (word == "stacks_end") return out;
        Seen s;
        in >> s.kind >> pid >> s.status;
        while (in >> f) s.top.push_back(f);
        out[pid] = s;
    }
}

// The processes of one kind all in one place, as the VM says: that place.
Seen one_place(const std::map<std::string, Seen>& seen, const std::string& kind, size_t count) {
    std::set<std::pair<std::string, std::vector<std::string>>> places;
    size_t n = 0;
    for (const auto& [pid, s] : seen)
        if (s.kind == kind) n++, places.insert({s.status, s.top});
    EXPECT_EQ(n, count) << kind;
    EXPECT_EQ(places.size(), 1u) << kind << ": the workload's processes are not all in one place";
    if (places.empty()) return {};
    return {kind, places.begin()->first, places.begin()->second};
}

std::string joined(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : " < ") + x;
    return s;
}

class StacksVmTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, StacksVmTest, ::testing::ValuesIn(test_vms()), test_vm_name);

TEST_P(StacksVmTest, GroupsAgreeWithTheVm) {
    ErlVm erl(vm(), "bb_stacks:main()");
    std::istringstream ready(erl.wait_line("ready", 60s));
    std::string word, server, deep;
    std::vector<std::string> busy;
    ready >> word >> server >> deep;
    while (ready >> word) busy.push_back(word);
    ASSERT_EQ(busy.size(), 3u) << erl.output();
    const std::string vm_pid = std::to_string(erl.os_pid());

    const auto before = vm_stacks(erl);
    ToolResult r = run_tool(kTool, {"--stacks", "--json", "--all", vm_pid}, 60s);
    ToolResult text = run_tool(kTool, {"--stacks", "-t", "4", vm_pid}, 60s);
    const auto after = vm_stacks(erl);
    ASSERT_EQ(before, after) << "the blocked processes moved while the tool read them";
    const Seen receivers = one_place(before, "receiver", 100), clients = one_place(before, "client", 50);
    const Seen server_at = before.at(server), deep_at = before.at(deep);
    ASSERT_EQ(receivers.status, "waiting");
    ASSERT_EQ(clients.status, "waiting");
    ASSERT_EQ(receivers.top.size(), 2u);
    ASSERT_EQ(clients.top.size(), 2u);
    ASSERT_EQ(clients.top[0], "gen:do_call/4");

    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(control_bytes_in(r.out), "");
    const auto j = nlohmann::json::parse(r.out);
    const auto& groups = j["groups"];
    EXPECT_EQ(groups.size(), j["groups_total"].get<size_t>());

    // The groups whose state and top two frames are the VM's for a kind of process.
    auto matching = [&](const Seen& s) {
        std::vector<nlohmann::json> out;
        for (const auto& g : groups) {
            std::vector<std::string> frames = g["frames"];
            if (g["state"] == s.status && frames.size() >= s.top.size() &&
                std::equal(s.top.begin(), s.top.end(), frames.begin()))
                out.push_back(g);
        }
        return out;
    };
    auto count_of = [](const std::vector<nlohmann::json>& gs) {
        long n = 0;
        for (const auto& g : gs) n += g["count"].get<long>();
        return n;
    };
    const auto rg = matching(receivers), cg = matching(clients);
    // The figures of the comparison, for the record.
    std::cout << "[          ] " << vm().name << ": receive-blocked: the VM 100 at " << joined(receivers.top)
              << ", beam-bpf-procs " << count_of(rg) << " in " << rg.size() << " group(s); call-blocked: the VM 50 at "
              << joined(clients.top) << ", beam-bpf-procs " << count_of(cg) << " in " << cg.size()
              << " group(s); changed while read " << j["changed_while_read"] << ", not walked " << j["not_walked"]
              << ", processes " << j["processes_total"] << ", read in " << j["read_ms"] << " ms\n";
    ASSERT_EQ(rg.size(), 1u) << r.out;
    EXPECT_EQ(rg[0]["count"], 100) << rg[0].dump();
    ASSERT_EQ(cg.size(), 1u) << r.out;
    EXPECT_EQ(cg[0]["count"], 50) << cg[0].dump();
    // Both biggest: nothing else on the VM has 50 processes in one place.
    EXPECT_EQ(groups[0]["count"], 100);
    EXPECT_EQ(groups[1]["count"], 50);
    // Each walked to its root: the frame that spawned it, and nothing past it.
    EXPECT_EQ(rg[0]["frames"].back(), "bb_stacks:receiver/0") << rg[0].dump();
    EXPECT_EQ(cg[0]["frames"].back(), "bb_stacks:client/0") << cg[0].dump();

    // The server: a group of its own, named.
    auto sg = matching(server_at);
    ASSERT_EQ(sg.size(), 1u) << joined(server_at.top) << "\n" << r.out;
    ASSERT_EQ(sg[0]["count"], 1) << sg[0].dump();
    EXPECT_EQ(sg[0]["processes"][0]["pid"], server);
    EXPECT_EQ(sg[0]["processes"][0]["name"], "bb_stacks_server");

    // 30,000 calls deep: the leaf-most frames, a run of deep/1, marked truncated.
    auto dg = matching(deep_at);
    ASSERT_EQ(dg.size(), 1u) << joined(deep_at.top) << "\n" << r.out;
    std::vector<std::string> df = dg[0]["frames"];
    EXPECT_EQ(df[1], "bb_stacks:deep/1");
    EXPECT_EQ(df.back().rfind("[truncated: stack deeper than", 0), 0u) << df.back();
    EXPECT_GT(df.size(), 5000u);  // a frame per one to three words read
    EXPECT_GE(j["truncated"].get<long>(), 1);

    // The busy loops: running (not walked: the function the VM noted, busy/1 or busy/2) or
    // runnable (walked) in busy/2, or left out as changed while read.
    long busy_seen = 0;
    for (const auto& g : groups)
        if (g["frames"][0].get<std::string>().starts_with("bb_stacks:busy/")) {
            EXPECT_TRUE(g["state"] == "running" || g["state"] == "runnable") << g.dump();
            busy_seen += g["count"].get<long>();
        }
    EXPECT_LE(busy_seen, 3);
    EXPECT_GE(busy_seen + j["changed_while_read"].get<long>(), 3) << r.out;
    // Every word with a continuation pointer's tag was a frame, a saved frame pointer (the
    // null one at the bottom too) or the normal exit: validation rejected none of these stacks.
    EXPECT_EQ(j["stray_words"], 0) << r.out;
    // Every process is in a group, or counted as left out.
    long total = 0;
    for (const auto& g : groups) total += g["count"].get<long>();
    EXPECT_EQ(total + j["changed_while_read"].get<long>() + j["exited_while_read"].get<long>() +
                  j["stack_unreadable"].get<long>(),
              j["processes_total"].get<long>());

    // The text: a summary, then groups, biggest first, each `COUNT  [STATE]` and its frames
    // leaf first; four groups (-t 4) and a line for the rest.
    ASSERT_EQ(text.exit_code, 0) << describe(text);
    EXPECT_EQ(control_bytes_in(text.out), "");
    EXPECT_NE(text.out.find("processes changed while read"), std::string::npos) << text.out;
    auto lines = lines_of(text.out);
    std::vector<size_t> headers;
    const std::regex header(R"(^ *[0-9]+  \[[a-z_]+\].*)");
    for (size_t i = 0; i < lines.size(); i++)
        if (std::regex_match(lines[i], header)) headers.push_back(i);
    ASSERT_EQ(headers.size(), 4u) << text.out;
    EXPECT_EQ(lines[headers[0]], "100  [waiting]") << text.out;
    EXPECT_EQ(lines[headers[0] + 1], "       " + receivers.top[0]) << text.out;
    EXPECT_EQ(lines[headers[0] + 2], "       " + receivers.top[1]) << text.out;
    EXPECT_EQ(lines[headers[1]], " 50  [waiting]") << text.out;
    EXPECT_EQ(lines[headers[1] + 1], "       gen:do_call/4") << text.out;
    EXPECT_NE(lines.back().find("more groups of"), std::string::npos) << text.out;
    std::cout << text.out.substr(0, text.out.find("\n 50  [waiting]")) << "\n";

    // Every group: the server's alone, its line naming it (a group of up to 3 is named).
    ToolResult all = run_tool(kTool, {"--stacks", "--all", vm_pid}, 60s);
    ASSERT_EQ(all.exit_code, 0) << describe(all);
    EXPECT_EQ(control_bytes_in(all.out), "");
    bool named = false;
    for (const auto& line : lines_of(all.out)) named |= line == "  1  [waiting]  " + server + " bb_stacks_server";
    EXPECT_TRUE(named) << all.out;
}

}  // namespace stacks_test

namespace stacks_test {

// Stacks that change all the time (tests/workloads/bb_stacks.erl, main(flip)): 200 processes,
// each woken every millisecond, alternate between waiting in wait_a/0 (from side_a/1) and in
// wait_b/0 (from side_b/1), both under flipper/1. Whatever instant the tool reads one at, a stack
// it shows is one the process can have: never wait_a/0 over side_b/1, say (a resume address
// read after a flip over frames read before it). Stacks caught changing are read again or left
// out, and counted.
TEST_P(StacksVmTest, ChangingStacksAreNeverShownWrong) {
    ErlVm erl(vm(), "bb_stacks:main(flip)");
    erl.wait_line("ready", 60s);
    const std::string f = "bb_stacks:flipper/1", sa = "bb_stacks:side_a/1", sb = "bb_stacks:side_b/1",
                      wa = "bb_stacks:wait_a/0", wb = "bb_stacks:wait_b/0";
    // Leaf first; a process preempted between the calls is in flipper/1 or side_x/1.
    const std::set<std::vector<std::string>> possible{{f}, {sa, f}, {sb, f}, {wa, sa, f}, {wb, sb, f}};
    const std::set<std::string> ours{f, sa, sb, wa, wb};
    long shown = 0, retried = 0, changed = 0, running = 0;
    for (int run = 0; run < 20; run++) {
        ToolResult r = run_tool(kTool, {"--stacks", "--json", "--all", std::to_string(erl.os_pid())}, 60s);
        ASSERT_EQ(r.exit_code, 0) << describe(r);
        const auto j = nlohmann::json::parse(r.out);
        retried += j["read_twice"].get<long>();
        changed += j["changed_while_read"].get<long>();
        long total = 0;
        for (const auto& g : j["groups"]) {
            std::vector<std::string> frames = g["frames"];
            total += g["count"].get<long>();
            if (!std::ranges::any_of(frames, [&](const std::string& x) { return ours.count(x) > 0; })) continue;
            shown += g["count"].get<long>();
            if (g["state"] == "running") {
                running += g["count"].get<long>();
                EXPECT_EQ(frames.size(), 1u) << g.dump();  // not walked: the function the VM names
            } else {
                EXPECT_TRUE(possible.count(frames)) << "a stack no flipper can have: " << g.dump();
            }
        }
        EXPECT_EQ(total + j["changed_while_read"].get<long>() + j["exited_while_read"].get<long>() +
                      j["stack_unreadable"].get<long>(),
                  j["processes_total"].get<long>());
    }
    std::cout << "[          ] " << vm().name << ": 20 runs: " << shown << " flipper stacks shown (" << running
              << " running, not walked), " << retried << " processes read twice, " << changed
              << " changed while read and left out\n";
    EXPECT_GT(shown, 20 * 190);  // nearly all 200 each time
}

}  // namespace stacks_test
