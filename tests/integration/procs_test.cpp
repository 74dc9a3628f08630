// beam-bpf-procs against the VM's own erlang:process_info/2, on every test VM: processes with
// known contents (a 10,000-message queue, a 1 MiB heap, a large refc binary, an Elixir name),
// all waiting, asked by the VM just before and just after the tool reads them from outside.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "harness.hpp"

namespace procs_test {

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
        between("memory", "memory");                           // the queued messages' too (bb_queue)
        if (k != 0) between("total_heap_size", "total_heap");  // process_info adds queued data
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
        std::string pid, memory, unit, binary, binary_unit;
        long heap;
        row >> pid >> memory >> unit >> binary >> binary_unit >> heap;
        if (last >= 0) {
            EXPECT_LE(heap, last) << table.out;
        }
        last = heap;
        big |= pid == pids[1] && lines[i].find("bb_big_heap") != std::string::npos;
    }
    EXPECT_TRUE(big) << table.out;

    std::string line = expect_one_line_error(run_tool(kTool, {"--sort", "size", std::to_string(erl.os_pid())}, 30s),
                                             kTool);
    EXPECT_NE(line.find("--sort size: the orders are"), std::string::npos) << line;
}

// beam-bpf-procs' memory against process_info(P, memory) of the same idle processes, whose
// memory lies mostly outside their heaps: 5,000 queued messages (on the heap's side and off the
// heap), 200 large ones, refc binaries (not counted by the VM), heap fragments, a big dictionary,
// an ETS owner. The tool reads first: the VM's own reading makes a process with heap fragments
// collect them afterwards.
TEST_P(ProcsVmTest, MemoryAsTheVmCountsIt) {
    ErlVm erl(vm(), "bb_memory:main()");
    std::istringstream ready(erl.wait_line("ready"));
    std::string word;
    ready >> word;
    std::map<std::string, std::string> pid_of;  // case -> pid
    while (ready >> word) pid_of[word.substr(0, word.find('='))] = word.substr(word.find('=') + 1);
    ASSERT_EQ(pid_of.size(), 7u) << erl.output();

    ToolResult r = run_tool(kTool, {"--json", "--all", std::to_string(erl.os_pid())}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    erl.send_line("info");
    std::map<std::string, long> vm_memory;
    for (;;) {
        std::istringstream in(erl.wait_line("mem"));
        std::string name;
        long bytes = 0;
        in >> word >> name >> bytes;
        if (word == "mem_end") break;
        vm_memory[name] = bytes;
    }
    auto j = nlohmann::json::parse(r.out);
    std::map<std::string, nlohmann::json> tool;
    for (const auto& p : j["processes"]) tool[p["pid"]] = p;
    for (const auto& [name, pid] : pid_of) {
        SCOPED_TRACE(name + " " + pid);
        ASSERT_TRUE(tool.count(pid)) << r.out;
        ASSERT_TRUE(vm_memory.count(name)) << erl.output();
        const auto& t = tool[pid];
        long ours = t["memory"], theirs = vm_memory[name];
        std::printf("memory %s: beam-bpf-procs %ld, process_info %ld (%+.2f%%)\n", name.c_str(), ours, theirs,
                    100.0 * (ours - theirs) / theirs);
        EXPECT_LE(std::abs(ours - theirs), theirs / 20) << "more than 5% from process_info(P, memory)";
        EXPECT_EQ(t["status"], "waiting");
    }
    EXPECT_EQ(tool[pid_of["queue"]]["queued_messages"], 5000);
    EXPECT_EQ(tool[pid_of["offheap_queue"]]["queued_messages"], 5000);
    EXPECT_EQ(tool[pid_of["big_messages"]]["queued_messages"], 200);
    EXPECT_GT(tool[pid_of["big_messages"]]["message_queue_data"], 200 * 1000 * 16);  // 1,000-element lists
    EXPECT_GT(tool[pid_of["fragments"]]["heap_fragments_size"], 3 * 3000 * 2);       // three 3,001-element lists
    EXPECT_GT(tool[pid_of["dictionary"]]["dictionary_bytes"], 2000 * 8);
    EXPECT_LT(tool[pid_of["binaries"]]["memory"], 1 << 20);  // the 8 MiB of binaries are not the process's
}

// --inspect against the VM's own printing (io_lib:format ~p) and sizing (erts_debug:flat_size/1)
// of the same values: a gen_server's state (a map, a list, refc and sub binaries, bignums, a
// string, a pid) and dictionary entry, and another process's queued messages.
TEST_P(ProcsVmTest, InspectAgreesWithTheVm) {
    ErlVm erl(vm(), "bb_state:main()");
    struct Expect {
        std::string kind;
        long words;
        std::string text;
    };
    std::vector<Expect> expected;
    for (int k = 0; k < 8; k++) {
        std::istringstream in(erl.wait_line("expect"));
        Expect e;
        std::string word;
        in >> word >> e.kind >> e.words;
        std::getline(in >> std::ws, e.text);
        expected.push_back(e);
    }
    const std::string waits_in = erl.wait_line("waits_in").substr(9);  // the VM's process_info
    std::istringstream ready(erl.wait_line("ready"));
    std::string word, state_pid, box_pid;
    ready >> word >> state_pid >> box_pid;

    auto inspect = [&](const std::string& proc) {
        ToolResult r = run_tool(kTool,
                                {"--inspect", proc, "--depth", "0", "--width", "0", "--all", "--json",
                                 std::to_string(erl.os_pid())},
                                60s);
        EXPECT_EQ(r.exit_code, 0) << describe(r);
        return nlohmann::json::parse(r.out);
    };
    // The state is one of the gen_server loop's Y registers; the dictionary value is under bb_key.
    auto state = inspect("bb_state");
    EXPECT_EQ(state["pid"], state_pid);
    EXPECT_EQ(state["name"], "bb_state");
    EXPECT_EQ(state["current_function"], waits_in);
    auto find = [](const nlohmann::json& j, const std::string& kind, const std::string& text) -> const nlohmann::json* {
        for (const auto& r : j["roots"])
            if (r["kind"] == kind && r["term"] == text) return &r;
        return nullptr;
    };
    const auto* s = find(state, "stack", expected[0].text);
    ASSERT_NE(s, nullptr) << "state " << expected[0].text << " not among\n" << state.dump(1);
    EXPECT_EQ((*s)["words"], expected[0].words);
    EXPECT_EQ((*s)["function"], waits_in);
    EXPECT_EQ((*s)["off_heap_bytes"], 1024);  // the refc binary; the sub-binary is of it, counted again
    const auto* d = find(state, "dictionary", expected[1].text);
    ASSERT_NE(d, nullptr) << state.dump(1);
    EXPECT_EQ((*d)["where"], "bb_key");
    EXPECT_EQ((*d)["words"], expected[1].words);
    // A hash map and a fun: their sizes (a fun prints as #Fun<...>, a hash map in hash order).
    for (int k : {5, 6}) {
        bool found = false;
        for (const auto& r : state["roots"])
            if (r["kind"] == "dictionary" && r["where"] == expected[k].kind) {
                found = true;
                EXPECT_EQ(r["words"], expected[k].words) << expected[k].kind << " " << r.dump();
                EXPECT_TRUE(r["decoded"].get<bool>()) << r.dump();
            }
        EXPECT_TRUE(found) << expected[k].kind << " not in\n" << state.dump(1);
    }
    // An OTP 29 native record (#bb_state:point{y = 2,x = [1,2],label = <<"p">>}; none before 29),
    // printed and sized as the VM does.
    const auto* rec = find(state, "dictionary", expected[7].text);
    ASSERT_NE(rec, nullptr) << expected[7].text << " not among\n" << state.dump(1);
    EXPECT_EQ((*rec)["where"], "bb_record");
    EXPECT_EQ((*rec)["words"], expected[7].words);
    if (vm().otp_release >= 29) {
        EXPECT_EQ(expected[7].text, "#bb_state:point{y = 2,x = [1,2],label = <<\"p\">>}");
    }

    // The messages, in the order they were sent.
    auto box = inspect(box_pid);
    EXPECT_EQ(box["name"], "bb_mailbox");
    EXPECT_EQ(box["message_queue_len"], 3);
    std::vector<nlohmann::json> messages;
    for (const auto& r : box["roots"])
        if (r["kind"] == "message") messages.push_back(r);
    std::sort(messages.begin(), messages.end(), [](const auto& a, const auto& b) {
        return std::stoi(a["where"].template get<std::string>().substr(1)) <
               std::stoi(b["where"].template get<std::string>().substr(1));
    });
    ASSERT_EQ(messages.size(), 3u) << box.dump(1);
    for (int k = 0; k < 3; k++) {
        EXPECT_EQ(messages[k]["term"], expected[2 + k].text);
        EXPECT_EQ(messages[k]["words"], expected[2 + k].words);
    }

    // Abbreviated: ~P's depth, then the width.
    ToolResult r = run_tool(kTool, {"--inspect", "bb_state", "--depth", "3", "--json", std::to_string(erl.os_pid())},
                            60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    auto shallow = nlohmann::json::parse(r.out);
    EXPECT_NE(find(shallow, "stack", "{bb_state,#{...},...}"), nullptr) << shallow.dump(1);

    std::string line = expect_one_line_error(run_tool(kTool, {"--inspect", "bb_nobody", std::to_string(erl.os_pid())},
                                                      30s),
                                             kTool);
    EXPECT_NE(line.find("no process is registered under that name"), std::string::npos) << line;
}

// A process that never stops running (it allocates in a loop): --inspect either catches it
// between two time slices, and then every term decodes, or says it is busy. Never a term read
// from a heap that moved under the copy.
TEST_P(ProcsVmTest, InspectOfARunningProcess) {
    ErlVm erl(vm(), "bb_work:main(alloc_arith)");
    std::istringstream ready(erl.wait_line("ready"));
    std::string word, alloc;
    ready >> word >> alloc;
    int copied = 0, busy = 0;
    for (int k = 0; k < 10; k++) {
        ToolResult r = run_tool(kTool, {"--inspect", alloc, "--all", "--json", std::to_string(erl.os_pid())}, 30s);
        if (r.exit_code == 0) {
            copied++;
            auto j = nlohmann::json::parse(r.out);
            for (const auto& root : j["roots"]) EXPECT_TRUE(root["decoded"].get<bool>()) << root.dump();
        } else {
            std::string line = expect_one_line_error(r, kTool);
            EXPECT_NE(line.find("busy, try again"), std::string::npos) << line;
            busy++;
        }
    }
    std::cout << "[          ] running process: " << copied << " copies, " << busy << " busy\n";
}

// A process waiting for a dirty collection of its large heap, with that heap abandoned (the
// collection found it full and could not run there: delay_garbage_collection(), erl_gc.c). Its
// stack, new heap and messages point into the abandoned heap, which --inspect copies too: every
// root decodes. Issue 22: RabbitMQ's busiest queue process, caught like this, had '<bad term>'
// roots. The one dirty CPU scheduler (+SDcpu 1:1) is held 100 ms at a time by another process,
// so the process spends most of its time waiting like that.
TEST_P(ProcsVmTest, InspectOfAnAbandonedHeap) {
    ErlVm erl(vm(), "bb_work:main(busy_queue)", {"+SDcpu", "1:1"});
    std::istringstream ready(erl.wait_line("ready"));
    std::string word, queue;
    ready >> word >> queue;
    ASSERT_TRUE(queue.starts_with("<")) << erl.output();
    int copies = 0, abandoned = 0, busy = 0, tries = 0;
    const auto deadline = std::chrono::steady_clock::now() + 14s;
    for (; abandoned < 3 && tries < 40 && std::chrono::steady_clock::now() < deadline; tries++) {
        ToolResult r = run_tool(kTool,
                                {"--inspect", "bb_busy_queue", "--all", "--json", "--depth", "0", "--width", "0",
                                 std::to_string(erl.os_pid())},
                                30s);
        if (r.exit_code != 0) {
            std::string line = expect_one_line_error(r, kTool);
            EXPECT_NE(line.find("busy, try again"), std::string::npos) << line;
            busy++;
            continue;
        }
        copies++;
        auto j = nlohmann::json::parse(r.out);
        EXPECT_EQ(j["pid"], queue);
        if (j["abandoned_heap_size"].get<long>() > 0) abandoned++;
        int undecoded = 0;
        for (const auto& root : j["roots"])
            if (!root["decoded"].get<bool>() && undecoded++ < 3) ADD_FAILURE() << root.dump();
        EXPECT_EQ(undecoded, 0) << "of " << j["roots"].size() << " roots; abandoned heap " << j["abandoned_heap_size"]
                                << " words";
    }
    std::cout << "[          ] " << tries << " tries: " << copies << " copies (" << abandoned
              << " with an abandoned heap), " << busy << " busy\n";
    EXPECT_GE(abandoned, 1) << "no copy caught the process with its heap abandoned: the test tested nothing";
}

// Two --watch intervals of 0.5 s ranked by `sort`, three rows each, as JSON.
std::vector<nlohmann::json> watch_intervals(ErlVm& erl, const std::string& sort) {
    ToolResult r = run_tool(kTool,
                            {"--watch", "0.5", "--count", "2", "--json", "--sort", sort, "-t", "3",
                             std::to_string(erl.os_pid())},
                            60s);
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    std::vector<nlohmann::json> out;
    for (const auto& line : lines_of(r.out)) {
        out.push_back(nlohmann::json::parse(line));
        EXPECT_FALSE(out.back()["processes"].empty()) << line;
    }
    EXPECT_EQ(out.size(), 2u) << r.out;
    return out;
}

// --watch: a process whose queue grows by a message every 5 ms ranks first by queue growth, and
// the growth it shows is the change in its queue between two readings.
TEST_P(ProcsVmTest, WatchShowsGrowth) {
    ErlVm erl(vm(), "bb_state:main()");
    erl.wait_line("ready");
    auto intervals = watch_intervals(erl, "queue");
    ASSERT_EQ(intervals.size(), 2u);
    long len[2];
    for (int k = 0; k < 2; k++) {
        const auto& j = intervals[k];
        ASSERT_FALSE(j["processes"].empty());
        const auto& top = j["processes"][0];
        EXPECT_EQ(top["name"], "bb_growing") << j.dump();
        long growth = top["message_queue_growth"];
        EXPECT_GE(growth, 20) << j.dump();  // 100 sent in 0.5 s; a loaded machine sends fewer
        len[k] = top["message_queue_len"];
        if (k == 1) {
            EXPECT_EQ(growth, len[1] - len[0]);
        }
        long last = growth;
        for (const auto& p : j["processes"]) {
            EXPECT_LE(p["message_queue_growth"].get<long>(), last) << j.dump();
            last = p["message_queue_growth"];
        }
    }
}

// --watch leaves out processes that neither grew nor ran in the interval (a table padded with
// +0 rows said nothing), and the VM's end ends the watch with a line saying so, not "cannot read
// the VM's process table".
TEST_P(ProcsVmTest, WatchOmitsIdleRowsAndEndsWithTheVm) {
    ErlVm erl(vm(), "bb_state:main()");
    erl.wait_line("ready");
    ToolResult r = run_tool(kTool, {"--watch", "0.5", "--count", "2", "--json", "--all", std::to_string(erl.os_pid())},
                            60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    for (const auto& line : lines_of(r.out)) {
        auto j = nlohmann::json::parse(line);
        EXPECT_FALSE(j["processes"].empty()) << line;  // bb_growing grows
        EXPECT_LT(j["processes"].size(), j["processes_total"].get<size_t>()) << "no process was left out:\n" << line;
        for (const auto& p : j["processes"])
            EXPECT_TRUE(p["new"].get<bool>() || p["memory_growth"].get<long>() > 0 ||
                        p["message_queue_growth"].get<long>() > 0 || p["reductions_in_interval"].get<long>() > 0)
                << p.dump();
    }

    RunningTool t = start_tool(kTool, {"--watch", "0.3", std::to_string(erl.os_pid())});
    std::this_thread::sleep_for(1500ms);
    erl.kill_now();
    ToolResult w = finish_tool(t, false, 15s);
    std::cout << "after the VM was killed: exit " << w.exit_code << ", " << w.err;
    EXPECT_EQ(w.exit_code, 0) << describe(w);
    EXPECT_NE(w.err.find("exited after"), std::string::npos) << describe(w);
    EXPECT_EQ(w.err.find("cannot read"), std::string::npos) << describe(w);
}

// The binaries each process references (the BINARY column, --binaries) against the VM's own
// process_info(P, binary), asked just before and just after the tool reads them: three
// processes sharing one 32 MiB binary, one holding 1,000 small ones, and every other process of
// the VM that did not run across the tool's reading (by its reductions).
TEST_P(ProcsVmTest, BinariesAgreeWithProcessInfo) {
    ErlVm erl(vm(), "bb_binaries:main(shared)");
    std::istringstream ready(erl.wait_line("ready"));
    std::string word;
    ready >> word;
    std::map<std::string, std::string> pid_of;  // a, b, c, many -> pid
    while (ready >> word) pid_of[word.substr(0, word.find('='))] = word.substr(word.find('=') + 1);
    ASSERT_EQ(pid_of.size(), 4u) << erl.output();

    // pid -> the sorted "address size" of each binary process_info(P, binary) lists, and the
    // process's reductions read in the same call; address -> refc
    using Lists = std::map<std::string, std::vector<std::string>>;
    struct Reading {
        Lists lists;
        std::map<std::string, std::string> reductions;
    };
    auto vm_lists = [&](std::map<std::string, long>* refc) {
        erl.send_line("info");
        Reading r;
        for (;;) {
            std::istringstream in(erl.wait_line(""));
            std::string pid, addr, size;
            long count = 0;
            in >> word;
            if (word == "bin_end") break;
            if (word == "proc") {
                in >> pid;
                in >> r.reductions[pid];
                r.lists[pid];
                continue;
            }
            if (word != "bin") continue;
            in >> pid >> addr >> size >> count;
            r.lists[pid].push_back(addr + " " + size);
            if (refc) (*refc)[addr] = count;
        }
        for (auto& [pid, l] : r.lists) std::sort(l.begin(), l.end());
        return r;
    };
    std::map<std::string, long> refc;
    const Reading before = vm_lists(nullptr);
    ToolResult table = run_tool(kTool, {"--json", "--all", std::to_string(erl.os_pid())}, 60s);
    ToolResult bins = run_tool(kTool, {"--binaries", "--json", "--all", std::to_string(erl.os_pid())}, 60s);
    const Reading after = vm_lists(&refc);
    ASSERT_EQ(table.exit_code, 0) << describe(table);
    ASSERT_EQ(bins.exit_code, 0) << describe(bins);

    // The tool's lists, from --binaries: pid -> "address size" of each reference.
    Lists ours;
    std::map<std::string, long> our_refc;
    const std::string big = std::to_string(32l << 20);
    nlohmann::json big_binary;
    const auto bins_json = nlohmann::json::parse(bins.out), table_json = nlohmann::json::parse(table.out);
    for (const auto& b : bins_json["binaries"]) {
        const std::string addr = std::to_string(b["address"].get<uint64_t>());
        our_refc[addr] = b["refc"];
        for (const auto& h : b["holders"])
            for (long k = 0; k < h["references"].get<long>(); k++)
                ours[h["pid"]].push_back(addr + " " + std::to_string(b["bytes"].get<uint64_t>()));
        if (std::to_string(b["bytes"].get<uint64_t>()) == big) big_binary = b;
    }
    for (auto& [pid, l] : ours) std::sort(l.begin(), l.end());
    std::map<std::string, nlohmann::json> rows;
    for (const auto& p : table_json["processes"]) rows[p["pid"]] = p;

    const long idle_growth = std::stol(after.reductions.at(pid_of["a"])) - std::stol(before.reductions.at(pid_of["a"]));
    size_t compared = 0, moved = 0;
    for (const auto& [pid, row] : rows) {
        // A process that ran between the VM's two readings (the I/O servers printing them, say)
        // may have changed its list and changed it back (collected the binaries of its writes), so
        // only those whose reductions grew by no more than a's are compared. (process_info on
        // another process is a signal the target handles itself, which costs it a reduction, so
        // even a process that did nothing else grows; a only waits in a receive.)
        auto rb = before.reductions.find(pid), ra = after.reductions.find(pid);
        if (rb == before.reductions.end() || ra == after.reductions.end() ||
            std::stol(ra->second) - std::stol(rb->second) != idle_growth) {
            moved++;
            continue;
        }
        const std::vector<std::string>&vb = before.lists.at(pid), &va = after.lists.at(pid), none;
        EXPECT_EQ(vb, va) << pid << " did not run, yet its list changed";
        SCOPED_TRACE(pid);
        compared++;
        uint64_t bytes = 0;
        for (const auto& e : va) bytes += std::stoull(e.substr(e.find(' ') + 1));
        EXPECT_EQ(row["binary_count"].get<size_t>(), va.size());
        EXPECT_EQ(row["binary_bytes"].get<uint64_t>(), bytes);
        auto o = ours.find(pid);
        EXPECT_EQ(o == ours.end() ? none : o->second, va) << "the binaries --binaries lists for it";
    }
    std::cout << compared << " processes' binaries compared with process_info(P, binary), " << moved
              << " ran while read; a's reductions grew by " << idle_growth << "\n";
    EXPECT_LE(moved, 6u);
    EXPECT_GE(compared, 20u);
    for (const char* p : {"a", "b", "c", "many"}) EXPECT_TRUE(rows.count(pid_of[p])) << p;
    EXPECT_EQ(rows[pid_of["many"]]["binary_count"], 1000);
    EXPECT_EQ(rows[pid_of["many"]]["binary_bytes"], 100000);

    // The shared binary: its three holders, its reference count as the VM gives it.
    ASSERT_TRUE(big_binary.is_object()) << bins.out;
    std::set<std::string> holders;
    for (const auto& h : big_binary["holders"]) holders.insert(h["pid"].get<std::string>());
    EXPECT_EQ(holders, (std::set<std::string>{pid_of["a"], pid_of["b"], pid_of["c"]})) << big_binary.dump();
    const std::string addr = std::to_string(big_binary["address"].get<uint64_t>());
    EXPECT_EQ(big_binary["refc"], refc[addr]);
    EXPECT_EQ(big_binary["refc"], 3);
    EXPECT_EQ(big_binary["references_elsewhere"], 0);

    // The text: the shared binary first, held by a, b and c.
    ToolResult text = run_tool(kTool, {"--binaries", "-t", "3", std::to_string(erl.os_pid())}, 60s);
    ASSERT_EQ(text.exit_code, 0) << describe(text);
    auto lines = lines_of(text.out);
    ASSERT_GE(lines.size(), 3u) << text.out;
    EXPECT_NE(lines[2].find("32 MiB"), std::string::npos) << text.out;
    for (const char* p : {"a", "b", "c"}) EXPECT_NE(lines[2].find(pid_of[p]), std::string::npos) << text.out;
}

// A binary leak (a process keeping a 10-byte sub-binary of each 1 MiB binary it is sent, every
// 10 ms) is the top row of --watch --sort binary from the first refresh, and its growth is the
// change in its BINARY column.
TEST_P(ProcsVmTest, BinaryLeakTopsTheWatch) {
    ErlVm erl(vm(), "bb_binaries:main(leak)");
    std::istringstream ready(erl.wait_line("ready"));
    std::string word, leak;
    ready >> word >> leak;
    leak = leak.substr(leak.find('=') + 1);
    auto intervals = watch_intervals(erl, "binary");
    ASSERT_EQ(intervals.size(), 2u);
    long bytes[2];
    for (int k = 0; k < 2; k++) {
        ASSERT_FALSE(intervals[k]["processes"].empty());
        const auto& top = intervals[k]["processes"][0];
        EXPECT_EQ(top["pid"], leak) << intervals[k].dump();
        EXPECT_EQ(top["name"], "bb_leak") << intervals[k].dump();
        long growth = top["binary_growth"];
        std::cout << "interval " << k + 1 << ": bb_leak +" << growth << " bytes of binaries, " << top["binary_count"]
                  << " binaries\n";
        // Up to 50 binaries sent in 0.5 s (binary:copy/2 of 1 MiB makes about 32 here, fewer on a
        // loaded machine): at least two.
        EXPECT_GE(growth, 2l << 20) << intervals[k].dump();
        bytes[k] = top["binary_bytes"];
        if (k == 1) {
            EXPECT_EQ(growth, bytes[1] - bytes[0]);
        }
    }
}

// The --ets listing of `erl` (bb_ets:main(tables)) against its ets:info/2.
void check_ets_tables(ErlVm& erl) {
    erl.wait_line("ready");
    // ref -> the words ets:info/2 gives: name named type protection owner size memory rc wc dc
    using Tables = std::map<std::string, std::vector<std::string>>;
    auto vm_tables = [&] {
        erl.send_line("info");
        Tables t;
        for (;;) {
            std::istringstream in(erl.wait_line("ets"));
            std::string word, ref;
            in >> word;
            if (word == "ets_end") break;
            in >> ref;
            for (std::string w; in >> w;) t[ref].push_back(w);
            EXPECT_EQ(t[ref].size(), 10u) << ref;
        }
        return t;
    };
    const Tables before = vm_tables();
    ToolResult r = run_tool(kTool, {"--ets", "--json", "--all", std::to_string(erl.os_pid())}, 60s);
    const Tables after = vm_tables();
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    const auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["lists_changed"], 0) << r.out;
    std::map<std::string, nlohmann::json> ours;
    for (const auto& t : j["tables"]) ours[t["ref"]] = t;
    EXPECT_EQ(j["tables_total"], ours.size());

    size_t compared = 0, ours_named = 0, exact = 0;
    for (const auto& [ref, vm_words] : after) {
        auto b = before.find(ref);
        if (b == before.end() || b->second != vm_words) continue;  // it changed between the readings
        SCOPED_TRACE(ref + " " + vm_words[0]);
        auto o = ours.find(ref);
        ASSERT_NE(o, ours.end()) << "not listed by --ets";
        const nlohmann::json& t = o->second;
        compared++;
        ours_named += vm_words[0].starts_with("t_");
        EXPECT_EQ(t["name"], vm_words[0]);
        EXPECT_EQ(t["named_table"].get<bool>(), vm_words[1] == "true");
        EXPECT_EQ(t["id"], vm_words[1] == "true" ? vm_words[0] : ref);
        EXPECT_EQ(t["type"], vm_words[2]);
        EXPECT_EQ(t["protection"], vm_words[3]);
        EXPECT_EQ(t["owner"], vm_words[4]);
        EXPECT_EQ(t["size"].get<long>(), std::stol(vm_words[5]));
        // ets:info(T, memory) is the table's count of bytes in words, rounded up: within 1%.
        const double words = std::stod(vm_words[6]);
        EXPECT_NEAR(t["memory_words"].get<double>(), words, words / 100);
        exact += t["memory_words"].get<double>() == words;
        EXPECT_EQ(t["read_concurrency"].get<bool>(), vm_words[7] == "true");
        EXPECT_EQ(t["write_concurrency"], vm_words[8]);
        EXPECT_EQ(t["decentralized_counters"].get<bool>(), vm_words[9] == "true");
    }
    std::cout << compared << " of " << after.size() << " tables compared with ets:info/2 (" << ours_named
              << " of the workload's 10), memory to the word in " << exact << "\n";
    EXPECT_EQ(ours_named, 10u);
    EXPECT_GE(compared, after.size() - 2);
    // Every table the VM lists is listed, and no other: a table made or deleted between the
    // readings is in one of them.
    for (const auto& [ref, t] : ours) EXPECT_TRUE(before.count(ref) || after.count(ref)) << t.dump();

    // The text: the biggest table first.
    ToolResult text = run_tool(kTool, {"--ets", "-t", "3", std::to_string(erl.os_pid())}, 60s);
    ASSERT_EQ(text.exit_code, 0) << describe(text);
    auto lines = lines_of(text.out);
    ASSERT_EQ(lines.size(), 6u) << text.out;
    std::string biggest;
    long most = -1;
    for (const auto& [ref, w] : after)
        if (std::stol(w[6]) > most) most = std::stol(w[6]), biggest = w[1] == "true" ? w[0] : ref;
    EXPECT_TRUE(lines[2].starts_with(biggest + " ")) << text.out;
}

// Every ETS table (--ets) against the VM's own ets:info/2, asked just before and just after the
// tool reads them: ten tables of every type, named and not, public, protected and private, with
// each kind of concurrency and decentralized counters, holding binaries and big tuples; and every
// other table of the VM that held still across the tool's reading. Run with the default counter
// groups and with one (+dcg1): a decentralized counter has a slot more than the groups.
TEST_P(ProcsVmTest, EtsTablesAgreeWithEtsInfo) {
    for (const std::vector<std::string>& args : {std::vector<std::string>{}, std::vector<std::string>{"+dcg1"}}) {
        SCOPED_TRACE(args.empty() ? "default counter groups" : args[0]);
        ErlVm erl(vm(), "bb_ets:main(tables)", args);
        check_ets_tables(erl);
    }
}

// --ets --watch: a table gaining an object (a 1 KiB binary and a 100-element tuple) every 10 ms is
// the top row in each interval, its growth the change in its memory between two readings.
TEST_P(ProcsVmTest, EtsWatchShowsTheGrowingTable) {
    ErlVm erl(vm(), "bb_ets:main(growing)");
    erl.wait_line("ready");
    ToolResult r = run_tool(kTool, {"--ets", "--watch", "0.5", "--count", "2", "--json", std::to_string(erl.os_pid())},
                            60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    auto lines = lines_of(r.out);
    ASSERT_EQ(lines.size(), 2u) << r.out;
    long bytes[2];
    for (int k = 0; k < 2; k++) {
        auto j = nlohmann::json::parse(lines[k]);
        ASSERT_FALSE(j["tables"].empty()) << lines[k];
        const auto& top = j["tables"][0];
        EXPECT_EQ(top["id"], "bb_growing") << lines[k];
        long growth = top["memory_growth"], objects = top["size_growth"];
        std::cout << "interval " << k + 1 << ": bb_growing +" << objects << " objects, +" << growth << " bytes\n";
        EXPECT_GE(objects, 5) << lines[k];                 // 50 in 0.5 s; a loaded machine makes fewer
        EXPECT_GT(growth, objects * 100 * 8) << lines[k];  // each holds a tuple of 100 words at least
        bytes[k] = top["memory_bytes"];
        if (k == 1) {
            EXPECT_EQ(growth, bytes[1] - bytes[0]);
        }
        for (const auto& t : j["tables"]) EXPECT_NE(t["id"], "bb_still") << lines[k];
    }
}

// In a terminal of 100 columns (COLUMNS, as a shell exports it) every line of the table and of
// --watch fits, names cut at their end; --watch's columns stay where they are from one refresh
// to the next while its rows change. Piped (no COLUMNS), nothing is cut but names past 48.
TEST(ProcsWidthTest, TablesFitTheTerminalAndWatchKeepsItsColumns) {
    ErlVm erl("bb_state:main()");
    erl.wait_line("ready");
    const std::string pid = std::to_string(erl.os_pid());
    setenv("COLUMNS", "100", 1);
    ToolResult table = run_tool(kTool, {pid}, 30s);
    ToolResult watch = run_tool(kTool, {"--watch", "0.3", "--count", "5", pid}, 60s);
    unsetenv("COLUMNS");
    ASSERT_EQ(table.exit_code, 0) << describe(table);
    ASSERT_EQ(watch.exit_code, 0) << describe(watch);
    for (const ToolResult* r : {&table, &watch})
        for (const std::string& line : lines_of(r->out)) EXPECT_LE(line.size(), 100u) << line;
    std::set<std::string> headings;
    size_t refreshes = 0;
    for (const std::string& line : lines_of(watch.out)) {
        if (line.starts_with("beam-bpf-procs: ")) refreshes++;
        if (line.starts_with("PID ")) headings.insert(line);
    }
    EXPECT_EQ(refreshes, 5u) << watch.out;
    EXPECT_EQ(headings.size(), 1u) << watch.out;  // the same columns in every refresh
    EXPECT_NE(table.out.find("bb_growing"), std::string::npos) << table.out;
    ToolResult piped = run_tool(kTool, {"--all", pid}, 30s);
    ASSERT_EQ(piped.exit_code, 0) << describe(piped);
    EXPECT_NE(piped.out.find("bb_state:growing/0"), std::string::npos) << piped.out;  // CURRENT whole
}

}  // namespace procs_test
