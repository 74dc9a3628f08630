// Mixed stacks on every test VM: native frames unwound in BPF from .eh_frame below the Erlang
// ones (tests/workloads/bb_native.erl). The native leaf shares are checked against `perf record`
// sampling the same VM over the same seconds; the GC stacks against the caller chain the workload
// has by construction.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>

#include <fstream>
#include <iterator>
#include <future>
#include <set>
#include <sstream>

#include "target/elf_file.hpp"
#include "harness.hpp"
#include "native/unwind_table.hpp"

namespace native_test {

using namespace bbt;

const std::string kTool = "beam-bpf-sample";

class NativeVmTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, NativeVmTest, ::testing::ValuesIn(test_vms()), test_vm_name);
// The long comparison with perf: on the VMs that differ for the walk (each release, frame
// layout, lock counting and form of 29 once: harness.hpp), as SampleVmTest's shares are; the
// suite above still unwinds native frames on every test VM.
class NativeSharesVmTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, NativeSharesVmTest, ::testing::ValuesIn(layout_vms()), test_vm_name);
// Tests that need the VM's own C functions named (a uprobe on one, or its frame checked by
// name): not on the stripped OTP 29, whose functions only its debug file names.
class NativeNamedVmTest : public VmTest {};
INSTANTIATE_TEST_SUITE_P(Vms, NativeNamedVmTest, ::testing::ValuesIn(probe_vms()), test_vm_name);

std::string ready_pid(ErlVm& erl) {
    std::istringstream ready(erl.wait_line("ready"));
    std::string word, pid;
    ready >> word >> pid;
    return pid;
}

// The path and runtime start of the VM's mapping of `name` (a library) at file offset 0.
std::pair<std::string, uint64_t> mapped(pid_t pid, const std::string& name) {
    std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
    std::string line;
    while (std::getline(maps, line)) {
        std::istringstream ls(line);
        std::string range, perms, offset, dev, inode, path;
        ls >> range >> perms >> offset >> dev >> inode >> path;
        if (path.find("/" + name) != std::string::npos && std::stoull(offset, nullptr, 16) == 0)
            return {path, std::stoull(range, nullptr, 16)};
    }
    return {};
}

// A zlib NIF loop: libz's functions as leaves, with their share of the VM's samples equal to
// what perf gives for the same seconds, and each such stack under its Erlang caller chain.
TEST_P(NativeSharesVmTest, ZlibLeafSharesAgreeWithPerf) {
    ErlVm erl(vm(), "bb_native:main(zlib)");
    ready_pid(erl);
    const std::string pid = std::to_string(erl.os_pid());
    auto [libz, libz_start] = mapped(erl.os_pid(), "libz.so");
    ASSERT_FALSE(libz.empty()) << "the VM maps no libz";
    const std::string data = ::testing::TempDir() + "/native-perf.data";

    // perf records the VM for the same 5 s as the tool samples it, at the same rate.
    auto perf = std::async(std::launch::async, [&] {
        return run_command({"perf", "record", "-q", "-e", "cpu-clock", "-F", "2999", "-p", pid, "-o", data, "--",
                            "sleep", "5"},
                           60s);
    });
    // 2,999 Hz, about 15,000 samples each: two independent samplers of an 80% share then differ
    // by 0.45 points (one standard deviation); at 999 Hz a CI run differed by 2.02.
    ToolResult r = run_tool(kTool, {"-d", "5", "-F", "2999", "--folded", pid}, 60s);
    ToolResult p = perf.get();
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    ASSERT_EQ(p.exit_code, 0) << describe(p);
    ToolResult script = run_command({"perf", "script", "-i", data, "-F", "ip,dso"}, 120s);
    ASSERT_EQ(script.exit_code, 0) << describe(script);

    // perf's leaves in libz, named as the tool names them: the exported symbol that holds the
    // address, else the library and the start of the function's FDE.
    bb::ElfFile elf = bb::ElfFile::open(libz).value_or_throw("");
    bb::UnwindTable table = bb::compile_unwind_table(libz);
    const std::string base = libz.substr(libz.rfind('/') + 1);
    uint64_t bias = libz_start - elf.first_load_vaddr();
    auto name_of = [&](uint64_t ip) -> std::string {
        uint64_t at = ip - bias;
        for (const auto& s : elf.symbols())
            if (s.is_func && at >= s.value && at < s.value + s.size) return s.name;
        if (auto f = table.function_at(at)) {
            char buf[32];
            std::snprintf(buf, sizeof(buf), "+%#llx", static_cast<unsigned long long>(f->first));
            return base + buf;
        }
        return base + "[?]";
    };
    std::map<std::string, double> perf_share, tool_share;
    double perf_all = 0, tool_all = 0;
    for (const auto& line : lines_of(script.out)) {
        std::istringstream ls(line);
        std::string ip, dso;
        ls >> ip >> dso;
        perf_all++;
        if (dso.find(base) != std::string::npos) perf_share[name_of(std::stoull(ip, nullptr, 16))]++;
    }
    std::set<std::string> libz_names;
    for (const auto& s : elf.symbols()) libz_names.insert(s.name);
    long chained = 0, in_libz = 0;
    for (const auto& [stack, n] : parse_folded(r.out)) {
        tool_all += n;
        auto frames = split_frames(stack);
        const std::string& leaf = frames.back();
        if (!leaf.starts_with(base + "+") && !libz_names.count(leaf)) continue;
        tool_share[leaf] += n;
        in_libz += n;
        // Root first: the workload's loop, an Erlang zlib function, then native frames.
        auto loop = std::find(frames.begin(), frames.end(), "bb_native:zip_loop/3");
        auto zlib = std::find_if(frames.begin(), frames.end(),
                                 [](const std::string& f) { return f.starts_with("zlib:"); });
        if (loop != frames.end() && zlib != frames.end() && loop < zlib) chained += n;
    }
    ASSERT_GT(perf_all, 1000) << script.out.substr(0, 2000);
    ASSERT_GT(tool_all, 1000) << describe(r);
    double perf_libz = 0, tool_libz = 0;
    for (auto& [f, v] : perf_share) perf_libz += v, v = 100 * v / perf_all;
    for (auto& [f, v] : tool_share) tool_libz += v, v = 100 * v / tool_all;
    std::cout << "libz leaf share: tool " << 100 * tool_libz / tool_all << "%, perf " << 100 * perf_libz / perf_all
              << "%; " << chained << " of " << in_libz << " libz samples under bb_native:zip_loop/3 and zlib:\n";
    EXPECT_GT(100 * tool_libz / tool_all, 20) << "the workload should spend its time in libz";
    EXPECT_NEAR(100 * tool_libz / tool_all, 100 * perf_libz / perf_all, 2.0);
    std::set<std::string> names;
    for (const auto& [f, v] : perf_share) names.insert(f);
    for (const auto& [f, v] : tool_share) names.insert(f);
    for (const auto& f : names) {
        double t = tool_share.count(f) ? tool_share[f] : 0, q = perf_share.count(f) ? perf_share[f] : 0;
        std::cout << "  " << f << ": tool " << t << "%, perf " << q << "%\n";
        if (t >= 2 || q >= 2) {
            EXPECT_NEAR(t, q, 2.0) << f;
        }
    }
    EXPECT_GE(chained, in_libz * 95 / 100) << r.out.substr(0, 4000);
}

// Samples in the collector: the exact Erlang chain on top (bb_native:gc_root/1 -> gc_mid/1 ->
// gc_loop/2 -> build/1 ...), then the VM's GC entry and the collector's own frames below it.
TEST_P(NativeNamedVmTest, GcStacksCarryTheErlangChain) {
    ErlVm erl(vm(), "bb_native:main(gc)");
    const std::string worker = ready_pid(erl);
    ToolResult r = run_tool(kTool, {"-d", "4", "--folded", "--process", worker, std::to_string(erl.os_pid())}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    long gc = 0, exact = 0, deeper = 0, mid_gc = 0;
    for (const auto& [stack, n] : parse_folded(r.out)) {
        auto frames = split_frames(stack);
        auto entry = std::find(frames.begin(), frames.end(), "erts_garbage_collect_nobump");
        if (entry == frames.end()) continue;
        // Taken while the collector had the heap in flux: the process is named under [gc], its
        // Erlang stack unreadable (docs/sample.md: the end of a run); no chain to check.
        if (frames.front() == "[gc]") {
            mid_gc += n;
            continue;
        }
        gc += n;
        // Root first: the chain, then build/1 as deep as the list was when the heap filled,
        // then JIT or native frames only.
        std::vector<std::string> want{"bb_native:gc_root/1", "bb_native:gc_mid/1", "bb_native:gc_loop/2"};
        bool ok = frames.size() > want.size() && std::equal(want.begin(), want.end(), frames.begin());
        size_t i = want.size();
        while (ok && i < frames.size() && frames[i] == "bb_native:build/1") i++;
        for (size_t k = i; ok && k < frames.size(); k++) ok = frames[k].find("bb_native:") == std::string::npos;
        if (ok) exact += n;
        if (entry + 1 != frames.end()) deeper += n;
    }
    std::cout << gc << " samples in GC, " << exact << " with the exact Erlang chain, " << deeper
              << " with the collector's frames below its entry; " << mid_gc
              << " more under [gc] (stack read mid-collection)\n";
    ASSERT_GT(gc, 100) << r.out.substr(0, 4000);
    EXPECT_GE(exact, gc * 95 / 100) << r.out.substr(0, 4000);
    EXPECT_GE(deeper, gc * 80 / 100) << r.out.substr(0, 4000);
}

// beam-bpf-blame decides "term_to_binary_1 is running" from the unwound native frames. The
// stack-word scan it used before (BB_BLAME_SCAN_ONLY=1) is measured on the same VM: most of
// term_to_binary/1's time is its trap continuation (beam_jit_call_bif -> the encoder), whose C
// frames lie where term_to_binary_1's were and may hold stale return addresses into it. A sample
// blamed on term_to_binary_1 whose stack does not hold it is a false attribution: the record's
// own native frames (checked against readelf and perf above) are the reference, and a sample
// in decode/1 (binary_to_term/1, which never calls it) is false whatever the frames say.
TEST_P(NativeNamedVmTest, BlameHasNoStaleSlotFalsePositives) {
    const std::string func = "term_to_binary_1";
    ErlVm erl(vm(), "bb_native:main(blame)");
    ready_pid(erl);
    auto count = [&](bool scan_only) {
        if (scan_only) setenv("BB_BLAME_SCAN_ONLY", "1", 1);
        // 11 to 17 blamed samples a second: 4 s is 45 or more, 3.7 standard deviations above the
        // floor below.
        ToolResult r = run_tool("beam-bpf-blame",
                                {"-d", "4", "--folded", "--exact", func, std::to_string(erl.os_pid())}, 60s);
        unsetenv("BB_BLAME_SCAN_ONLY");
        EXPECT_EQ(r.exit_code, 0) << describe(r);
        long held = 0, not_held = 0, in_decode = 0;
        for (const auto& [stack, n] : parse_folded(r.out)) {
            auto frames = split_frames(stack);
            bool has = std::count(frames.begin(), frames.end(), func);
            (has ? held : not_held) += n;
            if (!has && !scan_only)
                std::cout << "  blamed without " << func << " on the stack: " << stack << " " << n << "\n";
            if (std::count(frames.begin(), frames.end(), "bb_native:decode/1")) in_decode += n;
        }
        return std::tuple{held, not_held, in_decode};
    };
    auto [scan_held, scan_false, scan_decode] = count(true);
    auto [held, unwound_false, decode] = count(false);
    std::cout << func << " blamed: unwound frames " << held << " samples, " << unwound_false << " without it on the "
              << "stack, " << decode << " in decode/1; stack scan " << scan_held << ", " << scan_false
              << " without it on the stack, " << scan_decode << " in decode/1\n";
    EXPECT_GT(held, 20);
    EXPECT_EQ(unwound_false, 0);
    EXPECT_EQ(decode, 0);
}

// Unwind rows that match nothing in the code (BB_INJECT_UNWIND_GARBAGE=1: random rules and
// offsets, so the walker follows garbage CFAs and reads garbage return addresses): the records
// are flagged and the run goes on; the Erlang frames, read from the process, are unaffected.
TEST_P(NativeVmTest, GarbageRowsAreFlaggedNotFatal) {
    ErlVm erl(vm(), "bb_native:main(zlib)");
    const std::string worker = ready_pid(erl);
    const std::string stats = ::testing::TempDir() + "/native-garbage-" + std::to_string(getpid()) + ".json";
    setenv("BB_INJECT_UNWIND_GARBAGE", "1", 1);
    ToolResult r = run_tool(
        kTool, {"-d", "3", "--folded", "--stats", stats, "--process", worker, std::to_string(erl.os_pid())}, 60s);
    unsetenv("BB_INJECT_UNWIND_GARBAGE");
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    nlohmann::json st = nlohmann::json::parse(std::ifstream(stats));
    long all = 0, chained = 0;
    for (const auto& [stack, n] : parse_folded(r.out)) {
        all += n;
        auto frames = split_frames(stack);
        if (std::count(frames.begin(), frames.end(), "bb_native:zip_loop/3")) chained += n;
    }
    std::cout << "garbage rows: " << all << " samples, " << st["native_unwind_stopped"] << " native walks stopped "
              << "short (" << st["native_no_row"] << " no row, " << st["native_bad_rule"] << " bad rule, "
              << st["native_truncated"] << " too deep), " << chained << " under bb_native:zip_loop/3\n";
    ASSERT_GT(all, 500);
    EXPECT_GT(st["native_unwind_stopped"].get<long>(), 0);
    EXPECT_GE(chained, all * 95 / 100);
}

// A NIF library the VM dlopen()s after the tool attached (crypto's, and libcrypto with it) is
// found at the next re-read of the mappings: its frames are unwound and named. Debian's OTP 25
// only: the OTP 27 test VMs are built without crypto.
class NativeDlopenTest : public RootTest {};

void nif_loaded_during_the_run_is_unwound(const TestVm& vm) {
    ErlVm erl(vm, "bb_native:main(late_crypto)");
    const std::string worker = ready_pid(erl);
    const std::string pid = std::to_string(erl.os_pid());
    const std::string stats = ::testing::TempDir() + "/native-dlopen.json";
    RunningTool t = start_tool(kTool, {"-d", "8", "-v", "--folded", "--stats", stats, "--process", worker, pid});
    std::string err;
    ASSERT_TRUE(wait_stderr(t, ": attached to ", 30s, &err)) << err;
    std::ifstream maps("/proc/" + pid + "/maps");
    std::string all_maps{std::istreambuf_iterator<char>(maps), {}};
    ASSERT_EQ(all_maps.find("crypto"), std::string::npos) << "crypto was mapped before the tool attached";
    // Only now: a worker that started after a fixed delay was mapped before a slow attach (3 s
    // in CI) had ended.
    erl.send_line("go");
    ToolResult r = finish_tool(t, false, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    nlohmann::json st = nlohmann::json::parse(std::ifstream(stats));
    // Each library's frames: its symbols, or its name and a function start.
    auto names_of = [&](const std::string& lib) {
        std::set<std::string> names;
        auto [path, start] = mapped(erl.os_pid(), lib);
        EXPECT_FALSE(path.empty()) << lib << " is not mapped at the end";
        if (!path.empty()) {
            bb::ElfFile elf = bb::ElfFile::open(path).value_or_throw("");
            for (const auto& s : elf.symbols()) names.insert(s.name);
        }
        return names;
    };
    const auto nif_names = names_of("crypto.so"), lib_names = names_of("libcrypto.so");
    long in_crypto = 0, through_nif = 0;
    for (const auto& [stack, n] : parse_folded(r.out)) {
        auto frames = split_frames(stack);
        auto erl_crypto = std::find_if(frames.begin(), frames.end(),
                                       [](const std::string& f) { return f.starts_with("crypto:"); });
        if (erl_crypto == frames.end()) continue;
        in_crypto += n;
        // Below the Erlang side: the NIF library's frames, then libcrypto's.
        bool nif = false, lib = false;
        for (const auto& f : frames) {
            nif |= f.starts_with("crypto.so+") || nif_names.count(f);
            lib |= f.starts_with("libcrypto.so") || lib_names.count(f);
        }
        if (nif && lib) through_nif += n;
    }
    // The files with rows at attach, from the attach line ("... rows of N files ...").
    size_t at = r.err.find(" unwind rows of ");
    ASSERT_NE(at, std::string::npos) << r.err;
    long files_at_attach = std::stol(r.err.substr(at + 16));
    std::cout << in_crypto << " samples in crypto:, " << through_nif << " of them through crypto.so into libcrypto; "
              << files_at_attach << " files with unwind rows at attach, " << st["unwind_files"] << " at the end\n";
    ASSERT_GT(in_crypto, 1000) << r.out.substr(0, 3000);
    EXPECT_GT(st["unwind_files"].get<long>(), files_at_attach);
    // The rest: Erlang and VM code of crypto:hash/4, and the samples of the first second after
    // the dlopen, before the next re-read of the mappings brings libcrypto's rows (the leaf alone,
    // named "[libcrypto.so.3]"): 85% through measured.
    EXPECT_GE(through_nif, in_crypto * 75 / 100) << r.out.substr(0, 3000);
}

TEST_F(NativeDlopenTest, NifLoadedDuringTheRunIsUnwound) { nif_loaded_during_the_run_is_unwound(debian_vm()); }

// The same where OpenSSL runs its AVX2 SHA-256, as on a CPU without SHA extensions (here masked
// by OpenSSL's own OPENSSL_ia32cap: CPUID leaf 7's EBX bit 29). That code realigns its stack and
// describes its frame with `.cfi_cfa_expression %rsp+N,deref,+8` (N negative in most of its
// loop): 51 of 5,306 samples went through crypto.so into libcrypto on such a CPU before the
// walker followed that rule (BB_CFA_RSP_DEREF).
TEST_F(NativeDlopenTest, NifLoadedDuringTheRunIsUnwoundThroughOpenSslAvx2) {
    TestVm vm = debian_vm();
    vm.env.push_back("OPENSSL_ia32cap=:~0x20000000");
    nif_loaded_during_the_run_is_unwound(vm);
}

// --only-erlang keeps the Erlang-only view: no native frame in any stack.
TEST_P(NativeVmTest, OnlyErlangHasNoNativeFrames) {
    ErlVm erl(vm(), "bb_native:main(gc)");
    const std::string worker = ready_pid(erl);
    ToolResult r = run_tool(kTool, {"-d", "2", "--folded", "--only-erlang", std::to_string(erl.os_pid())}, 60s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    long all = 0;
    for (const auto& [stack, n] : parse_folded(r.out)) {
        all += n;
        for (const auto& f : split_frames(stack)) {
            // The markers of a process caught mid-collection or exiting (docs/sample.md: the end of
            // a run) are not native frames.
            if (f == "[gc]" || f == "[exiting]") continue;
            EXPECT_NE(f.find(':'), std::string::npos) << f;  // Erlang (or the JIT's global::...) only
        }
    }
    EXPECT_GT(all, 100);
}

}  // namespace native_test
