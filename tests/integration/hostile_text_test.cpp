// A VM whose text is hostile (issue 20; tests/workloads/bb_hostile.erl): processes registered
// under atoms holding terminal escapes (ESC [2J, ESC ]0;...BEL, U+009B, U+202E, a newline) and
// running a function whose name holds ESC ]0;...BEL. Every tool prints them escaped as io_lib
// does ('bb_clear\e[2J'), no control byte reaches its output or its files, and its JSON parses.
// And bb_shared_dict, whose dictionary holds 3,000 keys sharing one 100,000-element list:
// --inspect walks the list once (it took 13.5 s, 51 s under load, walking it per key).
// Bytes that are not UTF-8 cannot be put in an atom from Erlang: base/text's unit tests cover
// them, and heap_inspect's unit tests the heaps only a NIF writing the VM's memory could make.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "control_bytes.hpp"
#include "gunzip.hpp"
#include "harness.hpp"

namespace hostile_text_test {

using namespace bbt;

// The processes' names as io_lib prints them: what the tools must show.
const std::vector<std::string> kEscapedNames = {"'bb_clear\\e[2J'", "'bb_title\\e]0;pwned\\007'", "'bb_csi\\2332J'",
                                                "'bb_rtl\\x{202E}txt.exe'", "'bb_nl\\nfake line'"};

class HostileTextTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, HostileTextTest, ::testing::ValuesIn(release_vms()), test_vm_name);

TEST_P(HostileTextTest, NoToolPrintsAControlByte) {
    ErlVm erl(vm(), "bb_hostile:main()");
    std::istringstream ready(erl.wait_line("ready"));
    std::string word, spinner;
    ready >> word >> spinner;
    const std::string pid = std::to_string(erl.os_pid());
    auto clean = [](const ToolResult& r, const std::string& what) {
        EXPECT_EQ(r.exit_code, 0) << what << ": " << describe(r);
        EXPECT_EQ(control_bytes_in(r.out), "") << what << " stdout";
        EXPECT_EQ(control_bytes_in(r.err), "") << what << " stderr";
    };
    auto names_shown = [](const std::string& out, const std::string& what) {
        for (const auto& name : kEscapedNames)
            EXPECT_NE(out.find(name), std::string::npos) << what << ": no " << name << " in\n" << out;
    };

    ToolResult procs = run_tool("beam-bpf-procs", {"--all", pid}, 30s);
    clean(procs, "procs");
    names_shown(procs.out, "procs");
    ToolResult json = run_tool("beam-bpf-procs", {"--all", "--json", pid}, 30s);
    clean(json, "procs --json");
    std::string names;
    const auto listed = nlohmann::json::parse(json.out);
    for (const auto& p : listed["processes"]) names += p["name"].get<std::string>() + "\n";
    names_shown(names, "procs --json");
    // A spinner is running or queued almost all the time: a copy taken while it ran is refused
    // ("busy, try again", one line) and taken again, as an operator would.
    ToolResult inspect;
    for (int tries = 0; tries < 10; tries++) {
        inspect = run_tool("beam-bpf-procs", {"--inspect", spinner, pid}, 30s);
        if (inspect.exit_code == 0) break;
        EXPECT_NE(expect_one_line_error(inspect, "beam-bpf-procs").find("busy, try again"), std::string::npos);
        EXPECT_EQ(control_bytes_in(inspect.err), "") << "procs --inspect stderr";
    }
    clean(inspect, "procs --inspect");
    // --stacks: the spinners' groups (running, or runnable and walked) name the function whose
    // name holds ESC ]0;...BEL, escaped (the JIT writes it \033 on OTP 25 and 27);
    // a group of up to 3 names its processes too.
    ToolResult stacks = run_tool("beam-bpf-procs", {"--stacks", "--all", pid}, 30s);
    clean(stacks, "procs --stacks");
    EXPECT_NE(stacks.out.find("bb_evil:'spin\\"), std::string::npos) << stacks.out;
    ToolResult stacks_json = run_tool("beam-bpf-procs", {"--stacks", "--all", "--json", pid}, 30s);
    clean(stacks_json, "procs --stacks --json");
    EXPECT_TRUE(nlohmann::json::accept(stacks_json.out)) << stacks_json.out;
    // -e wall: the same names, escaped (every process each tick; folded: the table leaves out
    // the idle ones, as these may be).
    ToolResult wall = run_tool("beam-bpf-sample",
                               {"-e", "wall", "-d", "1", "--per-tick", "100000", "--by-process", "-f", "folded", pid},
                               30s);
    clean(wall, "sample -e wall");
    names_shown(wall.out, "sample -e wall --by-process");

    const std::string prefix = ::testing::TempDir() + "bb_hostile_" + std::to_string(getpid());
    ToolResult sample = run_tool("beam-bpf-sample",
                                 {"-d", "2", "--by-process", "--format", "top,folded,speedscope,html,pprof", "-o",
                                  prefix, "--stats", prefix + ".stats.json", pid},
                                 60s);
    clean(sample, "sample");
    for (const char* suffix : {".txt", ".folded", ".speedscope.json", ".html", ".stats.json"}) {
        std::string text = read_file(prefix + suffix);
        EXPECT_FALSE(text.empty()) << suffix;
        EXPECT_EQ(control_bytes_in(text), "") << suffix;
    }
    names_shown(read_file(prefix + ".folded"), "folded --by-process");
    for (const char* file : {".speedscope.json", ".stats.json"})
        EXPECT_TRUE(nlohmann::json::accept(read_file(prefix + file))) << prefix + file << " is not JSON";
    // pprof is binary (its lengths may be any byte): none of the raw escapes, the escaped names.
    const std::string pb = gunzip(read_file(prefix + ".pb.gz")).value_or("");
    ASSERT_FALSE(pb.empty());
    for (const char* raw : {"\x1b[2J", "\x1b]0;", "\xc2\x9b", "\xe2\x80\xae", "bb_nl\n"})
        EXPECT_EQ(pb.find(raw), std::string::npos) << "pprof holds " << raw;
    EXPECT_NE(pb.find("'bb_clear\\e[2J'"), std::string::npos);
    for (const char* suffix : {".txt", ".folded", ".speedscope.json", ".html", ".stats.json", ".pb.gz"})
        std::filesystem::remove(prefix + suffix);

    ToolResult pstack = run_tool("beam-bpf-sample", {"--pstack", pid}, 30s);
    clean(pstack, "--pstack");
    EXPECT_NE(pstack.out.find("bb_evil:'spin"), std::string::npos) << pstack.out;
    ToolResult blame = run_tool("beam-bpf-blame", {"-d", "2", "erts_garbage_collect", pid}, 60s);
    if (vm().functions_named) {
        clean(blame, "blame");
    } else {  // the stripped 29: refused in one line, which is printable too
        expect_one_line_error(blame, "beam-bpf-blame");
        EXPECT_EQ(control_bytes_in(blame.err), "") << "blame stderr";
    }
}

// 3,000 dictionary values that are one list: one row, each key's flat size the list's (as
// erts_debug:flat_size/1 has it), the list's words once in the distinct total.
TEST_P(HostileTextTest, SharedDictionaryListIsWalkedOnce) {
    ErlVm erl(vm(), "bb_hostile:main()");
    std::istringstream ready(erl.wait_line("ready"));
    std::vector<std::string> words;
    for (std::string w; ready >> w;) words.push_back(w);
    ASSERT_EQ(words.size(), 8u) << erl.output();
    const long list_words = std::stol(words[7]);
    ToolResult r = run_tool("beam-bpf-procs", {"--inspect", "bb_shared_dict", "--json", std::to_string(erl.os_pid())},
                            60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    std::cout << "[          ] --inspect of 3,000 keys sharing a " << list_words << "-word list: " << r.seconds
              << " s\n";
    auto j = nlohmann::json::parse(r.out);
    EXPECT_FALSE(j.contains("partial")) << j["partial"];
    const auto& dict = j["totals"]["dictionary"];
    EXPECT_EQ(dict["terms"], 3000);
    EXPECT_EQ(dict["words"], 3000 * list_words);
    EXPECT_EQ(dict["distinct_words"], list_words);
    int rows = 0;
    for (const auto& root : j["roots"])
        if (root["kind"] == "dictionary") {
            rows++;
            EXPECT_EQ(root["words"], list_words);
            EXPECT_EQ(root["same_term_roots"], 2999);
            EXPECT_EQ(root["term"].get<std::string>().substr(0, 8), "[1,2,3,4");
        }
    EXPECT_EQ(rows, 1) << j.dump(1);
}

}  // namespace hostile_text_test
