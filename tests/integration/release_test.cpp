// Which VMs beam-bpf accepts, and how it finds their layout, against real binaries: copies of
// the test VMs' beam.smp patched the way other builds differ (another build-id, another release,
// another flavor, an unknown build feature), run through the real erlexec; and a VM in its own
// pid and mount namespace, as in a container. These tests load BPF: they need root, never skip.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <iterator>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "harness.hpp"
#include "target/vm.hpp"

namespace release_test {

using namespace bbt;
namespace fs = std::filesystem;

const std::string kTool = "beam-bpf-sample";
const std::string kDebianBuildId = "94bcd90b66fca38e41e627fa3a2ec089b2e498be";

std::string read_all(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

// The erts-*/bin directory of a test VM's installation (where erlexec and beam.smp are).
fs::path erts_bin(const TestVm& vm) {
    fs::path root = fs::canonical(vm.bin_dir + "/erl").parent_path().parent_path();  // .../lib/erlang
    for (const auto& e : fs::directory_iterator(root))
        if (e.path().filename().string().starts_with("erts-")) return e.path() / "bin";
    throw std::runtime_error("no erts-*/bin under " + root.string());
}

// A copy of `base`'s erts bin/ in a temp dir (symlinks) whose emulator `beam_file` is patched
// by `patch`; the returned TestVm starts it through the real erlexec.
struct PatchedVm {
    fs::path dir;
    TestVm vm;
    std::string build_id;  // of the patched binary

    PatchedVm(const TestVm& base, const std::string& beam_file, const std::function<void(std::string&)>& patch) {
        fs::path bin = erts_bin(base);
        dir = fs::path(::testing::TempDir()) / ("bb_patched_" + std::to_string(getpid()) + "_" + beam_file);
        fs::remove_all(dir);
        fs::create_directories(dir);
        for (const auto& e : fs::directory_iterator(bin))
            if (e.path().filename() != beam_file) fs::create_symlink(e.path(), dir / e.path().filename());
        std::string image = read_all(bin / beam_file);
        patch(image);
        std::ofstream(dir / beam_file, std::ios::binary) << image;
        fs::permissions(dir / beam_file, fs::perms::owner_all);
        // The GNU build-id note: namesz 4, descsz 20, type 3, "GNU\0", then the 20 bytes of id.
        const std::string note("\x04\0\0\0\x14\0\0\0\x03\0\0\0GNU\0", 16);
        size_t at = image.find(note);
        for (int i = 0; at != std::string::npos && i < 20; i++) {
            char hex[3];
            snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(image[at + 16 + i]));
            build_id += hex;
        }
        vm = base;
        vm.name += "_patched";
        vm.launcher = {(dir / "erlexec").string()};
        vm.env = {"ROOTDIR=" + bin.parent_path().parent_path().string(), "BINDIR=" + dir.string(), "EMU=beam",
                  "PROGNAME=erl"};
    }
    ~PatchedVm() {
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
};

// Replaces `from` by `to` (same length) at its first place in the image; fails the test if absent.
void replace_once(std::string& image, const std::string& from, const std::string& to) {
    ASSERT_EQ(from.size(), to.size());
    size_t at = image.find(from);
    ASSERT_NE(at, std::string::npos) << "'" << from << "' not in the binary";
    image.replace(at, from.size(), to);
}

void flip_build_id(std::string& image) {
    const std::string note("\x04\0\0\0\x14\0\0\0\x03\0\0\0GNU\0", 16);
    size_t at = image.find(note);
    ASSERT_NE(at, std::string::npos);
    image[at + 16 + 19] ^= 0x5a;
}

// Profiles `erl` running split532 for 3 s: the tool must work and see the workload.
ToolResult profile_split532(const TestVm& vm, std::vector<std::string> extra = {}) {
    ErlVm erl(vm, "bb_work:main(split532)");
    erl.wait_line("ready", 30s);
    std::vector<std::string> args{"-d", "3", "--folded", "--only-erlang", "-v"};  // -v: where the offsets came from
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(std::to_string(erl.os_pid()));
    return run_tool(kTool, args, 60s);
}

// Of the samples in f5, f3 or f2 (folded --only-erlang output of split532), how many carry
// exactly root;chain1;chain2;fN, as in SampleVmTest.Split532Shares: {exact, all}.
std::pair<long, long> exact_chains(const std::string& folded) {
    static const std::regex leaf("bb_work:f[235]/2"),
        chain("bb_work:root/0;bb_work:chain1/0;bb_work:chain2/0;bb_work:f[235]/2");
    long exact = 0, all = 0;
    for (const auto& [stack, count] : parse_folded(folded)) {
        if (!std::regex_search(stack, leaf)) continue;
        all += count;
        if (std::regex_match(stack, chain)) exact += count;
    }
    return {exact, all};
}

class ReleaseTest : public RootTest {};

// A stripped VM of a supported release whose build-id no table names (every self-built VM):
// profiled with no option, from the table for its release.
TEST_F(ReleaseTest, UnknownBuildIdProfiledWithNoOption) {
    PatchedVm p(debian_vm(), "beam.smp", flip_build_id);
    ASSERT_NE(p.build_id, kDebianBuildId);
    ToolResult r = profile_split532(p.vm);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.err.find("OTP 25 (erts-13.1.5, jit)"), std::string::npos) << describe(r);
    EXPECT_NE(r.err.find("build-id " + p.build_id), std::string::npos) << describe(r);
    EXPECT_NE(r.err.find("offsets from built-in table otp25.txt"), std::string::npos) << describe(r);
    EXPECT_NE(r.out.find("bb_work:f5/2"), std::string::npos) << describe(r);
}

TEST_F(ReleaseTest, ErrorUnsupportedRelease) {
    PatchedVm p(debian_vm(), "beam.smp",
                [](std::string& image) { replace_once(image, "Erlang/OTP 25%s [erts-", "Erlang/OTP 24%s [erts-"); });
    ToolResult r = profile_split532(p.vm);
    std::string line = expect_one_line_error(r, kTool);
    for (const std::string& needle :
         {std::string("OTP 24 (erts-13.1.5, jit)"), std::string("OTP 25 to 29"), "build-id " + p.build_id})
        EXPECT_NE(line.find(needle), std::string::npos) << needle << " not in: " << line;
}

// No [jit...] tag in the version string: the interpreter (emu flavor).
TEST_F(ReleaseTest, ErrorInterpreterFlavor) {
    PatchedVm p(debian_vm(), "beam.smp",
                [](std::string& image) { replace_once(image, " [jit:ns%s]", std::string(11, ' ')); });
    ToolResult r = profile_split532(p.vm);
    std::string line = expect_one_line_error(r, kTool);
    EXPECT_NE(line.find("emu flavor"), std::string::npos) << line;
    EXPECT_NE(line.find("OTP 25"), std::string::npos) << line;
}

// OTP 28 is described from its sources, not run here. A VM that says it is 28 gets 27's layout,
// which the live checks must accept (it is 27's binary), and a warning.
TEST_F(ReleaseTest, DescribedReleaseProfiledWithWarning) {
    PatchedVm p(vm_named("otp27"), "beam.smp",
                [](std::string& image) { replace_once(image, "Erlang/OTP 27%s [erts-", "Erlang/OTP 28%s [erts-"); });
    ToolResult r = profile_split532(p.vm);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.err.find("warning: OTP 28 is described from its sources but untested"), std::string::npos)
        << describe(r);
    EXPECT_NE(r.out.find("bb_work:root/0;bb_work:chain1/0;bb_work:chain2/0;bb_work:f5/2"), std::string::npos)
        << describe(r);
    // 28's source keeps atom text in binaries; this 27 binary keeps byte pointers there: init's
    // name does not read as described, and names are refused in one line, not misread.
    EXPECT_NE(r.err.find("processes are shown by pid only: the registered name of <0.0.0> does not read as init"),
              std::string::npos)
        << describe(r);
}

// A build feature no table is for (here: the lock-counting build, its tag renamed): the tool
// starts from the release's plain table, whose Process.scheduler_data is 8 bytes short for this
// build, finds it in the live VM (from the processes running there), says so, and profiles
// exactly.
TEST_F(ReleaseTest, UnknownFeatureCheckedLive) {
    const TestVm& lcnt = vm_named("otp27_lcnt");
    PatchedVm p(lcnt, "beam.lcnt.smp",
                [](std::string& image) { replace_once(image, "[lock-counting]", "[lock-countinq]"); });
    ToolResult r = profile_split532(p.vm);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.err.find("warning: no offset table for lock-countinq"), std::string::npos) << describe(r);
    EXPECT_NE(r.err.find("corrected in the live VM"), std::string::npos) << describe(r);
    auto [exact, all] = exact_chains(r.out);
    std::cout << "layout checked live: " << exact << " of " << all << " samples on the exact chain\n";
    ASSERT_GE(all, 1000) << describe(r);
    EXPECT_GE(100.0 * double(exact) / double(all), 99.0) << r.out;
}

// What build options move (Process.scheduler_data, the process table's read-only part, the
// scheduler data fields and their array stride) is found again in a live VM, busy on one of its
// schedulers, from a table that has it wrong.
class LiveLayoutTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, LiveLayoutTest, ::testing::ValuesIn(test_vms()), test_vm_name);

TEST_P(LiveLayoutTest, CorrectsShiftedFields) {
    ErlVm erl(vm(), "bb_work:main(split532)", {"+S", "2"});
    erl.wait_line("ready");
    bb::Vm live = bb::Vm::attach(erl.os_pid());
    const bb::VmOffsets& right = live.offsets();
    ASSERT_EQ(live.layout_mismatch(right), "");
    bb::VmOffsets wrong = right;
    for (uint32_t* f : {&wrong.ptab_tab, &wrong.ptab_max, &wrong.ptab_pix_mask, &wrong.ptab_pix_cl_mask,
                        &wrong.ptab_pix_cl_shift, &wrong.ptab_pix_cli_mask, &wrong.ptab_pix_cli_shift})
        *f += 64;
    wrong.esd_no += 8;
    wrong.esd_type += 8;
    wrong.esd_current_process += 8;
    wrong.aligned_esd_size += 64;
    wrong.proc_scheduler_data += 8;
    std::string why = live.layout_mismatch(wrong);
    EXPECT_NE(why, "");
    std::cout << vm().name << ": the shifted table fails the live checks: " << why << "\n";
    EXPECT_TRUE(live.correct_layout(wrong));
    EXPECT_EQ(live.layout_mismatch(wrong), "");
    EXPECT_TRUE(wrong.same_values(right)) << bb::format_table(wrong) << "\nwant\n" << bb::format_table(right);
}

// --offsets is the user's word, so it is checked, never corrected: a wrong value is refused.
TEST_F(ReleaseTest, WrongOffsetsFileRefused) {
    ErlVm erl("bb_work:main(idle)");
    erl.wait_line("ready");
    std::string table = read_all(std::string(BB_SOURCE_DIR) + "/userspace/target/offsets/otp25.txt");
    size_t at = table.find("proc_htop 80\n");
    ASSERT_NE(at, std::string::npos);
    table.replace(at, 13, "proc_htop 96\n");
    fs::path file = fs::path(::testing::TempDir()) / "bb_wrong_offsets.txt";
    std::ofstream(file) << table;
    ToolResult r = run_tool(kTool, {"-d", "1", "--offsets", file.string(), std::to_string(erl.os_pid())}, 30s);
    std::string line = expect_one_line_error(r, kTool);
    EXPECT_NE(line.find("do not match"), std::string::npos) << line;
    EXPECT_NE(line.find("refusing to report garbage"), std::string::npos) << line;

    // The right table works, and the tool says where its offsets came from.
    std::string right = read_all(std::string(BB_SOURCE_DIR) + "/userspace/target/offsets/otp25.txt");
    std::ofstream(file) << right;
    ToolResult ok = run_tool(kTool, {"-d", "1", "-v", "--offsets", file.string(), std::to_string(erl.os_pid())}, 30s);
    EXPECT_EQ(ok.exit_code, 0) << describe(ok);
    EXPECT_NE(ok.err.find("offsets from table " + file.string()), std::string::npos) << describe(ok);

    // The same table for another release is refused before any check.
    at = table.find("otp_release 25");
    table.replace(at, 14, "otp_release 27");
    table.erase(table.find("build_id "), table.find('\n', table.find("build_id ")) + 1 - table.find("build_id "));
    std::ofstream(file) << table;
    r = run_tool(kTool, {"-d", "1", "--offsets", file.string(), std::to_string(erl.os_pid())}, 30s);
    line = expect_one_line_error(r, kTool);
    EXPECT_NE(line.find("is for OTP 27"), std::string::npos) << line;
    fs::remove(file);
}

// The other +JPperf modes of OTP 26 on: `no_fp` (perf support, single-mapped code, no frame
// pointers) and `map` (frame pointers and a perf map). Stacks as exact as with the defaults.
TEST_F(ReleaseTest, JitPerfModesOtp27) {
    for (const char* mode : {"no_fp", "map"}) {
        TestVm v = vm_named("otp27");
        v.args = {"+JPperf", mode};
        ToolResult r = profile_split532(v, {"--stats", ::testing::TempDir() + "bb_perf_mode.json"});
        ASSERT_EQ(r.exit_code, 0) << mode << "\n" << describe(r);
        auto [exact, all] = exact_chains(r.out);
        std::cout << "+JPperf " << mode << ": " << exact << " of " << all << " samples on the exact chain\n";
        ASSERT_GE(all, 1000) << describe(r);
        EXPECT_GE(100.0 * double(exact) / double(all), 99.0) << r.out;
    }
}

// A VM in its own pid and mount namespace, its installation at a path that does not exist on
// the host (the host's path to it is hidden under a tmpfs inside the namespace): profiled from
// the host by its host pid, Erlang and native frames named.
TEST_F(ReleaseTest, ContainerVmByHostPid) {
    const TestVm& base = vm_named("otp27");
    fs::path bin = erts_bin(base);
    fs::path root = bin.parent_path().parent_path();  // .../lib/erlang
    const std::string erts = bin.parent_path().filename().string();
    const std::string inside = "/mnt/bb-container-otp";  // exists only in the namespace
    ASSERT_FALSE(fs::exists(inside));
    const std::string beams = workload_beam_dir(base);
    // Inside: a tmpfs on /mnt holds the mount point; the installation is bound there; then the
    // host's copy is hidden. `exec` keeps the namespace's pid 1 as the VM.
    const std::string script =
        "set -e; mount -t tmpfs none /mnt; mkdir -p " + inside + "; mount --bind " + root.string() + " " + inside +
        "; mount -t tmpfs none " + root.string() + "; export ROOTDIR=" + inside + " BINDIR=" + inside + "/" + erts +
        "/bin EMU=beam PROGNAME=erl; mkfifo /mnt/stdin; exec " + inside + "/" + erts + "/bin/erlexec -noshell -pa " +
        beams + " -eval 'bb_work:main(split532)' 0<>/mnt/stdin";  // a stdin that never ends (the workload stops at EOF)
    ChildProcess unshare({"unshare", "--pid", "--mount", "--fork", "--kill-child", "--mount-proc", "sh", "-c", script});

    // The VM is unshare's child: pid 1 in its namespace, some other pid here.
    pid_t vm_pid = 0;
    for (int i = 0; i < 200 && !vm_pid; i++) {
        std::ifstream children("/proc/" + std::to_string(unshare.pid()) + "/task/" + std::to_string(unshare.pid()) +
                               "/children");
        pid_t child = 0;
        if (children >> child) {
            std::error_code ec;
            auto exe = fs::read_symlink("/proc/" + std::to_string(child) + "/exe", ec).string();
            if (exe.ends_with("/beam.smp")) vm_pid = child;
        }
        if (!vm_pid) std::this_thread::sleep_for(50ms);
    }
    ASSERT_GT(vm_pid, 0) << "the VM did not start in its namespace";
    std::error_code ec;
    const std::string exe = fs::read_symlink("/proc/" + std::to_string(vm_pid) + "/exe", ec).string();
    EXPECT_TRUE(exe.starts_with(inside)) << exe;
    EXPECT_FALSE(fs::exists(exe)) << exe << " must not exist on the host";
    std::string status = read_all("/proc/" + std::to_string(vm_pid) + "/status");
    EXPECT_NE(status.find("NSpid:\t" + std::to_string(vm_pid) + "\t1\n"), std::string::npos) << status;
    std::this_thread::sleep_for(3s);  // the workload calibrates

    ToolResult r = run_tool(kTool, {"-d", "3", "--folded", std::to_string(vm_pid)}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.err.find("OTP 27"), std::string::npos) << describe(r);
    long exact = 0, all = 0, native_named = 0;
    for (const auto& [stack, count] : parse_folded(r.out)) {
        all += count;
        if (stack.find("bb_work:root/0;bb_work:chain1/0;bb_work:chain2/0;bb_work:f") != std::string::npos)
            exact += count;
        // A native frame of beam.smp named by symbol (not [beam.smp]) needs its file, which only
        // the namespace can open.
        if (stack.find("erts_") != std::string::npos || stack.find("process_main") != std::string::npos)
            native_named += count;
    }
    std::cout << "container VM (host pid " << vm_pid << "): " << exact << " of " << all
              << " samples on the exact chain, " << native_named << " with a named beam.smp frame\n";
    ASSERT_GE(all, 1000) << describe(r);
    EXPECT_GE(100.0 * double(exact) / double(all), 90.0) << r.out.substr(0, 3000);
    EXPECT_GT(native_named, 0) << r.out.substr(0, 3000);
}

}  // namespace release_test
