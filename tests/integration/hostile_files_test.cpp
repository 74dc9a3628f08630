// A hostile VM's files and threads (issue 20), on every test VM: real BPF, real `erl`. The VM
// (tests/workloads/bb_hostile_files.erl) loads a NIF library (tests/fixtures/hostile_nif.c) from a
// directory of the test's, which then unlinks it and plants, at the name the kernel gives the
// deleted mapping ("<path> (deleted)"), what a compromised VM could: a FIFO (an open would never
// return), a symlink to a host file (root would read it), a device node. The tool must finish
// in its time, name and unwind the deleted library from the inode the VM maps, and open nothing
// but mapped inodes (checked with strace -y). Then: more threads than the usual descriptor limit
// allows per-thread events for, and a report written through a planted symlink.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>

#include "harness.hpp"

#ifndef BB_HOSTILE_NIF
#error "BB_HOSTILE_NIF must name the built tests/fixtures/hostile_nif.c"
#endif

namespace hostile_files_test {

using namespace bbt;
namespace fs = std::filesystem;

// A directory of the test's holding a copy of the NIF library, and a VM that loads it from
// there with a process in its C loop.
template <typename Base>
class WithHostileVm : public Base {
protected:
    void SetUp() override {
        Base::SetUp();
        char tmpl[] = "/tmp/bb-hostile-XXXXXX";
        ASSERT_NE(mkdtemp(tmpl), nullptr);
        dir_ = tmpl;
        lib_ = dir_ + "/hostile_nif.so";
        fs::copy_file(BB_HOSTILE_NIF, lib_);
    }
    void TearDown() override {
        std::error_code ec;
        fs::remove_all(dir_, ec);
    }
    std::unique_ptr<ErlVm> start_vm(const TestVm& vm, std::vector<std::string> args = {}) {
        auto erl = std::make_unique<ErlVm>(vm, "bb_hostile_files:main(\"" + dir_ + "/hostile_nif\")", std::move(args));
        erl->wait_line("ready");
        erl->send_line("spin");
        erl->wait_line("spinning");
        return erl;
    }
    std::string dir_, lib_;
};

// What depends on the VM (its libraries, unwinding through them) on every test VM; what
// depends only on the tool on Debian's OTP 25.
class HostileFilesVmTest : public WithHostileVm<VmTest> {};
INSTANTIATE_TEST_SUITE_P(Vms, HostileFilesVmTest, ::testing::ValuesIn(release_vms()), test_vm_name);
class HostileFilesTest : public WithHostileVm<RootTest> {};

const std::string kSample = tools_dir() + "/beam-bpf-sample";

// Samples whose stack holds hf_outer calling hf_inner (the leaf) under an Erlang frame of
// bb_hostile_files: the deleted library named by its symbols and unwound by its rows.
long unwound_in_library(const std::string& folded) {
    long n = 0;
    for (const auto& [stack, count] : parse_folded(folded)) {
        auto f = split_frames(stack);
        if (f.size() < 3 || f.back() != "hf_inner" || f[f.size() - 2] != "hf_outer") continue;
        bool erlang = false;
        for (const auto& frame : f) erlang |= frame.starts_with("bb_hostile_files:");
        n += erlang ? count : 0;
    }
    return n;
}

// What beam-bpf-sample opened (strace -f -y): each open call's path argument and the file its
// descriptor turned out to be.
struct Opened {
    std::string line, path, result;
};
std::vector<Opened> opens_in(const std::string& log) {
    std::vector<Opened> out;
    std::ifstream in(log);
    std::string line;
    while (std::getline(in, line)) {
        if (line.find("open") == std::string::npos || line.find("resumed") != std::string::npos) continue;
        auto q = line.find('"');
        auto q2 = q == std::string::npos ? q : line.find('"', q + 1);
        if (q2 == std::string::npos) continue;
        Opened o{line, line.substr(q + 1, q2 - q - 1), ""};
        if (auto eq = line.rfind(" = "); eq != std::string::npos) o.result = line.substr(eq + 3);
        out.push_back(std::move(o));
    }
    return out;
}

TEST_P(HostileFilesVmTest, DeletedLibraryWithThingsPlantedAtItsName) {
    auto erl = start_vm(vm());
    const std::string pid = std::to_string(erl->os_pid());
    // The host file a symlink points to: what root must never read for the target.
    const std::string secret = dir_ + "/host-secret";
    std::ofstream(secret) << "not for the target\n";
    ASSERT_EQ(unlink(lib_.c_str()), 0);
    const std::string planted = lib_ + " (deleted)";

    struct Plant {
        const char* what;
        std::function<int()> make;
    };
    const std::vector<Plant> plants{
        {"a FIFO", [&] { return mkfifo(planted.c_str(), 0644); }},
        {"a symlink to a host file", [&] { return symlink(secret.c_str(), planted.c_str()); }},
        {"a device node", [&] { return mknod(planted.c_str(), S_IFCHR | 0644, makedev(1, 3)); }},
    };
    for (const auto& plant : plants) {
        SCOPED_TRACE(plant.what);
        ASSERT_EQ(plant.make(), 0) << std::strerror(errno);
        const std::string log = dir_ + "/strace.log";
        // Its bound: 2 s of sampling and the attach (about 0.5 s), strace's cost, and margin.
        // LeakSanitizer cannot run under ptrace: off for the traced tool of a sanitized build.
        auto r = run_command({"strace", "-f", "-y", "-qq", "-E", "ASAN_OPTIONS=detect_leaks=0", "-e",
                              "trace=open,openat,openat2", "-o", log, kSample, "-d", "2", "--folded", pid},
                             30s);
        ASSERT_EQ(r.exit_code, 0) << describe(r);
        EXPECT_LT(r.seconds, 12.0) << describe(r);
        long in_lib = unwound_in_library(r.out);
        std::cout << plant.what << ": " << in_lib << " samples in hf_outer;hf_inner under bb_hostile_files, "
                  << r.seconds << " s\n";
        EXPECT_GT(in_lib, 100) << r.out.substr(0, 3000) << r.err;

        auto opens = opens_in(log);
        EXPECT_GT(opens.size(), 10u) << "strace saw no opens: " << log;
        bool through_map_files = false;
        for (const auto& o : opens) {
            // Never a path of the test's directory (the VM's files) by name, planted or not...
            EXPECT_EQ(o.path.find(dir_), std::string::npos) << o.line;
            // ...and never the host file, whatever path led there.
            EXPECT_EQ(o.result.find(secret), std::string::npos) << o.line;
            through_map_files |= o.path.find("/map_files/") != std::string::npos &&
                                 o.result.find("hostile_nif.so") != std::string::npos;
        }
        EXPECT_TRUE(through_map_files) << "the deleted library was not opened as its mapping";
        ASSERT_EQ(unlink(planted.c_str()), 0);
    }
}

// More VM threads than descriptors under the usual `ulimit -n 1024` (soft and hard): +SDio 700
// still fits one event per thread; 1,000 more threads from the NIF do not, and the tool samples
// through per-CPU events, saying so in its attach line.
TEST_F(HostileFilesTest, MoreThreadsThanDescriptors) {
    auto erl = start_vm(debian_vm(), {"+SDio", "700"});
    const std::string pid = std::to_string(erl->os_pid());
    auto run = [&] {
        return run_command({"sh", "-c", "ulimit -n 1024 && exec \"$0\" -d 2 --folded \"$1\"", kSample, pid}, 30s);
    };
    auto r = run();
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(r.err.find("per-CPU events"), std::string::npos) << r.err;
    EXPECT_GT(unwound_in_library(r.out), 100) << r.err;

    erl->send_line("threads 1000");
    EXPECT_EQ(erl->wait_line("threads"), "threads 1000");
    r = run();
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.err.find("sampled through per-CPU events: the VM's"), std::string::npos) << r.err;
    long in_lib = unwound_in_library(r.out);
    std::cout << "1,7xx threads under ulimit -n 1024: " << in_lib << " samples in the NIF, per CPU\n";
    EXPECT_GT(in_lib, 100) << r.err;

    // The agent's one walker samples every VM it follows: per-CPU events there would sample the
    // other VMs' threads a second time, so such a VM is refused, and says why.
    r = run_command({"sh", "-c",
                     "ulimit -n 1024 && exec timeout --preserve-status -s INT 12 \"$0\" --output \"$1\" --match 'SDio "
                     "700'",
                     tools_dir() + "/beam-bpf-agent", dir_ + "/agent"},
                    30s);
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.err.find("refused pid " + pid + " "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("threads need more descriptors than the limit of 1024"), std::string::npos) << r.err;
    erl->send_line("stop_threads");
}

// -o through a symlink planted at its name (a sticky, world-writable /tmp): the link is
// replaced by the report, the file it pointed to is untouched. The same for --every files.
TEST_F(HostileFilesTest, ReportsAreNotWrittenThroughPlantedSymlinks) {
    auto erl = start_vm(debian_vm());
    const std::string pid = std::to_string(erl->os_pid());
    const std::string secret = dir_ + "/host-secret", out = dir_ + "/profile.folded";
    std::ofstream(secret) << "not for the target\n";
    ASSERT_EQ(symlink(secret.c_str(), out.c_str()), 0);
    auto r = run_tool("beam-bpf-sample", {"-d", "1", "--folded", "-o", out, pid});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    struct stat st;
    ASSERT_EQ(lstat(out.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << "the report did not replace the planted link";
    std::stringstream written, kept;
    written << std::ifstream(out).rdbuf();
    kept << std::ifstream(secret).rdbuf();
    EXPECT_GT(parse_folded(written.str()).size(), 0u);
    EXPECT_EQ(kept.str(), "not for the target\n");

    // Every name the next seconds' --every files can take, planted.
    const time_t now = time(nullptr);
    for (time_t t = now; t < now + 8; t++) {
        char stamp[32];
        tm utc{};
        gmtime_r(&t, &utc);
        strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
        ASSERT_EQ(symlink(secret.c_str(), (dir_ + "/every-" + stamp + ".folded").c_str()), 0);
    }
    r = run_tool("beam-bpf-sample", {"-d", "2.5", "--every", "1", "--folded", "-o", dir_ + "/every-%t.folded", pid});
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    int reports = 0;
    for (const auto& e : fs::directory_iterator(dir_)) {
        // The reports replaced their planted links; the links of seconds not reached remain.
        if (!e.path().filename().string().starts_with("every-") || e.is_symlink()) continue;
        std::stringstream s;
        s << std::ifstream(e.path()).rdbuf();
        reports += !parse_folded(s.str()).empty();
    }
    EXPECT_GE(reports, 2) << r.err;
    kept.str("");
    kept << std::ifstream(secret).rdbuf();
    EXPECT_EQ(kept.str(), "not for the target\n");
    // No temporary left behind.
    for (const auto& e : fs::directory_iterator(dir_)) EXPECT_FALSE(e.path().filename().string().starts_with("."));
}

// The installed tools have no fault injection: BB_INJECT_HANDLER_ERROR makes the test build's
// copy lose records (tests/integration/sample_test.cpp), the installed binary none.
TEST_F(HostileFilesTest, InstalledToolsIgnoreFaultInjection) {
    auto erl = start_vm(debian_vm());
    setenv("BB_INJECT_HANDLER_ERROR", "2", 1);
    auto installed = run_command({kSample, "-d", "1", "--folded", std::to_string(erl->os_pid())}, 30s);
    auto hooked = run_tool("beam-bpf-sample", {"-d", "1", "--folded", std::to_string(erl->os_pid())});
    unsetenv("BB_INJECT_HANDLER_ERROR");
    ASSERT_EQ(installed.exit_code, 0) << describe(installed);
    EXPECT_EQ(installed.err.find("injected fault"), std::string::npos) << installed.err;
    EXPECT_NE(hooked.err.find("injected fault"), std::string::npos) << hooked.err;
}

}  // namespace hostile_files_test
