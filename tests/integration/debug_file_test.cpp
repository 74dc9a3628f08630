// A stripped OTP 29 ("otp29": built with -fvisibility=hidden, then stripped, so no symbol of the
// VM's globals or functions is left). beam-bpf-sample and beam-bpf-procs find the globals in the
// VM's memory (the test matrix runs them on it); blame and -e alloc place uprobes on the VM's
// functions, which only a debug file names. Without one they refuse in one line that names what
// is missing and what would provide it; with the build's debug file served by a real debuginfod
// on loopback (DEBUGINFOD_URLS), they find the functions there and work. These tests load BPF:
// they need root and never skip.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "harness.hpp"

namespace debug_file_test {

using namespace bbt;
namespace fs = std::filesystem;

// scripts/build-test-vms.sh 29 keeps beam.smp as `make install` left it (-g) beside the forms.
const char* kUnstripped = "/var/tmp/beam-bpf-otp29/debug/beam.smp";
const std::string kAllocFns[] = {"bb_work:alloc_loop/0", "bb_work:build/2"};

// Sets an environment variable for the tools this test runs (they inherit the environment).
struct ScopedEnv {
    std::string name;
    ScopedEnv(std::string n, const std::string& value) : name(std::move(n)) { setenv(name.c_str(), value.c_str(), 1); }
    ~ScopedEnv() { unsetenv(name.c_str()); }
};

// debuginfod (elfutils) serving dir/files on a free loopback port, killed with the test.
class Debuginfod {
public:
    explicit Debuginfod(const fs::path& dir) {
        const int port = free_port();
        url_ = "http://127.0.0.1:" + std::to_string(port);
        pid_ = fork();
        if (pid_ == 0) {
            std::freopen((dir / "debuginfod.log").c_str(), "w", stderr);
            std::freopen("/dev/null", "w", stdout);
            execlp("debuginfod", "debuginfod", "-F", (dir / "files").c_str(), "-p", std::to_string(port).c_str(), "-d",
                   (dir / "index.sqlite").c_str(), nullptr);
            _exit(127);
        }
    }
    ~Debuginfod() {
        if (pid_ > 0) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
    }
    const std::string& url() const { return url_; }
    // Up when it answers for `build_id` (it indexes the directory at start).
    bool serves(const std::string& build_id) const {
        for (int i = 0; i < 60; i++) {
            ToolResult r = run_command({"curl", "-sf", "-o", "/dev/null", url_ + "/buildid/" + build_id + "/debuginfo"},
                                       10s);
            if (r.exit_code == 0) return true;
            std::this_thread::sleep_for(500ms);
        }
        return false;
    }

private:
    pid_t pid_ = -1;
    std::string url_;
};

std::string build_id_of(const std::string& path) {
    ToolResult r = run_command({"readelf", "-n", path}, 10s);
    auto at = r.out.find("Build ID: ");
    return at == std::string::npos ? "" : r.out.substr(at + 10, 40);
}

class DebugFileTest : public RootTest {
protected:
    const TestVm& vm() const { return vm_named("otp29"); }
};

TEST_F(DebugFileTest, StrippedOtp29ProbesRefusedInOneLine) {
    ErlVm erl(vm(), "bb_work:main(alloc_arith)");
    erl.wait_line("ready");
    const std::string pid = std::to_string(erl.os_pid());
    for (auto [tool, args] :
         {std::pair{"beam-bpf-blame", std::vector<std::string>{"--count", "-d", "1", "erts_garbage_collect"}},
          std::pair{"beam-bpf-sample", std::vector<std::string>{"-e", "alloc", "--watchpoints-in-vm", "-d", "1"}}}) {
        args.push_back(pid);
        ToolResult r = run_tool(tool, args, 60s);
        const std::string line = expect_one_line_error(r, tool);
        EXPECT_NE(line.find("is stripped"), std::string::npos) << line;
        EXPECT_NE(line.find("DEBUGINFOD_URLS"), std::string::npos) << line;
        EXPECT_NE(line.find("/usr/lib/debug/.build-id/"), std::string::npos) << line;
        EXPECT_EQ(line.find("flavor"), std::string::npos) << "not a flavor problem: " << line;
    }
}

TEST_F(DebugFileTest, StrippedOtp29ProbedWithItsDebugFileFromDebuginfod) {
    ASSERT_TRUE(fs::exists(kUnstripped)) << kUnstripped << ": scripts/build-test-vms.sh 29 makes it";
    const std::string id = build_id_of(kUnstripped);
    ASSERT_EQ(id.size(), 40u);
    // The stripped VM is the same link as the unstripped one: one build-id.
    std::string stripped;
    for (const auto& e : fs::directory_iterator(vm().bin_dir + "/../lib/erlang"))
        if (e.path().filename().string().starts_with("erts-")) stripped = (e.path() / "bin" / "beam.smp").string();
    ASSERT_EQ(build_id_of(stripped), id) << stripped;
    ToolResult syms = run_command({"readelf", "-S", stripped}, 10s);
    EXPECT_EQ(syms.out.find(".symtab"), std::string::npos) << stripped << " is not stripped";
    ASSERT_FALSE(fs::exists("/usr/lib/debug/.build-id/" + id.substr(0, 2) + "/" + id.substr(2) + ".debug"))
        << "a debug file on the host would hide what this test checks";

    const fs::path dir = fs::path(::testing::TempDir()) / ("bb-debuginfod-" + std::to_string(getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir / "files");
    ToolResult k = run_command(
        {"objcopy", "--only-keep-debug", kUnstripped, (dir / "files" / "beam.smp.debug").string()});
    ASSERT_EQ(k.exit_code, 0) << describe(k);
    Debuginfod server(dir);
    ASSERT_TRUE(server.serves(id)) << "debuginfod did not serve " << id;
    ScopedEnv urls("DEBUGINFOD_URLS", server.url());
    ScopedEnv cache("DEBUGINFOD_CACHE_PATH", (dir / "cache").string());

    ErlVm erl(vm(), "bb_work:main(alloc_arith)");
    erl.wait_line("ready");
    const std::string pid = std::to_string(erl.os_pid());

    ToolResult b = run_tool("beam-bpf-blame", {"-d", "4", "-v", "erts_garbage_collect", pid}, 90s);
    ASSERT_EQ(b.exit_code, 0) << describe(b);
    EXPECT_NE(b.err.find("(debuginfod)"), std::string::npos) << b.err;
    // -v: how long each step of attaching took, the debug file's fetch one of them.
    EXPECT_TRUE(std::regex_search(b.err, std::regex(R"(: attaching took \d+ ms: executable \d+, debug file \d+, .*)"
                                                    R"(BPF load and attach \d+ \(ms\))")))
        << b.err;
    bool allocator_named = false;
    for (const auto& f : kAllocFns) allocator_named |= b.out.find(f) != std::string::npos;
    EXPECT_TRUE(allocator_named) << b.out;
    EXPECT_EQ(b.out.find("bb_work:arith"), std::string::npos) << b.out;

    ToolResult a = run_tool("beam-bpf-sample", {"-e", "alloc", "--watchpoints-in-vm", "-d", "4", "--folded", pid}, 90s);
    ASSERT_EQ(a.exit_code, 0) << describe(a);
    long words = 0, in_alloc = 0;
    for (const auto& [stack, count] : parse_folded(a.out)) {
        words += count;
        if (stack.find("bb_work:build/2") != std::string::npos) in_alloc += count;
    }
    EXPECT_GT(words, 0) << a.out;
    EXPECT_GT(in_alloc * 2, words) << "most words from the allocating loop\n" << a.out;
    fs::remove_all(dir);
}

}  // namespace debug_file_test
