// JitCodeIndex and NativeSymbols against a real `erl`: the VM's own GDB JIT list, its own perf
// map as the oracle for names, and code loaded while we watch.
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "target/elf_file.hpp"
#include "target/vm.hpp"
#include "harness.hpp"
#include "symbols/jit_code.hpp"
#include "native/native_symbols.hpp"

namespace jit_code_live_test {

uint64_t now_ns() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1'000'000'000 + uint64_t(ts.tv_nsec);
}

// Reads Erlang expressions from stdin, one a line, and prints "result ~p" for each.
constexpr const char* kEvalLoop =
    "io:format(\"ready~n\"),"
    "Loop = fun L() ->"
    "  case io:get_line(\"\") of"
    "    eof -> halt();"
    "    Line ->"
    "      {ok, Toks, _} = erl_scan:string(Line),"
    "      {ok, Exprs} = erl_parse:parse_exprs(Toks),"
    "      {value, V, _} = erl_eval:exprs(Exprs, []),"
    "      io:format(\"result ~p~n\", [V]),"
    "      L()"
    "  end"
    " end,"
    "Loop().";

// A VM idling in kEvalLoop, with its pid (beam.smp's: `erl` execs it).
class Erl {
public:
    explicit Erl(std::vector<std::string> extra_args = {}) : Erl(bbt::debian_vm(), std::move(extra_args)) {}
    Erl(const bbt::TestVm& vm, std::vector<std::string> extra_args) : vm_(vm, kEvalLoop, std::move(extra_args)) {
        vm_.wait_line("ready");
    }
    pid_t pid() const { return vm_.os_pid(); }
    std::string eval(const std::string& expr) {
        vm_.send_line(expr);
        return vm_.wait_line("result ");
    }

private:
    bbt::ErlVm vm_;
};

struct Mapping {
    uint64_t start, end, offset;
    std::string perms, path;
};

std::vector<Mapping> mappings(pid_t pid) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/maps");
    std::vector<Mapping> out;
    for (std::string line; std::getline(f, line);) {
        std::istringstream in(line);
        Mapping m;
        std::string range, dev, inode;
        in >> range >> m.perms >> std::hex >> m.offset >> dev >> inode;
        std::getline(in >> std::ws, m.path);
        m.start = std::stoull(range.substr(0, range.find('-')), nullptr, 16);
        m.end = std::stoull(range.substr(range.find('-') + 1), nullptr, 16);
        out.push_back(m);
    }
    return out;
}

std::string exe_of(pid_t pid) {
    char buf[4096];
    ssize_t n = readlink(("/proc/" + std::to_string(pid) + "/exe").c_str(), buf, sizeof buf - 1);
    if (n <= 0) throw std::runtime_error("readlink exe");
    return std::string(buf, size_t(n));
}

// Load bias of beam.smp: where its offset-0 mapping starts minus the vaddr the file gives it.
uint64_t load_bias(pid_t pid, const bb::ElfFile& elf) {
    for (const auto& m : mappings(pid))
        if (m.path == elf.path() && m.offset == 0) return m.start - elf.first_load_vaddr();
    throw std::runtime_error("beam.smp is not mapped");
}

// Every module reachable by looking up addresses across the VM's executable JIT mappings.
// Keyed by module: names are not unique (the JIT's own shared code registers as "global", and
// so does kernel's Erlang module global).
// By base: VMs share equal modules (bb::share_module()), so one could stand at two bases.
using Swept = std::map<uint64_t, const bb::JitModule*>;
Swept sweep_modules(const bb::JitCodeIndex& idx, pid_t pid, uint64_t sample_ns) {
    Swept found;
    for (const auto& m : mappings(pid)) {
        if (m.path.find("memfd:vmem") == std::string::npos || m.perms[2] != 'x') continue;
        for (uint64_t a = m.start; a < m.end;) {
            auto hit = idx.lookup(a, sample_ns);
            if (!hit) {
                a += 16;  // a module's ranges tile its code, so no module is this small
                continue;
            }
            found.emplace(hit->base, hit->module);
            a = std::max(a + 16, hit->base + hit->module->code_size);
        }
    }
    return found;
}

// Its base and symbols.
std::pair<uint64_t, const bb::JitModule*> module_named(const Swept& modules, const std::string& name) {
    for (const auto& [base, m] : modules)
        if (m->name == name && !m->ranges.empty() && m->ranges[0].name == name + "::codeHeader") return {base, m};
    return {0, nullptr};
}

const bb::JitRange* range_named(const bb::JitModule& m, const std::string& name) {
    // The last one: the function's code, after its CodeInfo/prologue range of the same name.
    const bb::JitRange* r = nullptr;
    for (const auto& range : m.ranges)
        if (range.name == name) r = &range;
    return r;
}

struct Attached {
    uint64_t descriptor = 0;
};

// The descriptor as the tools find it (target/vm.hpp): its symbol, or, in a stripped OTP 29,
// the VM's memory. The perf map the VM writes itself is then the oracle for what it leads to.
Attached attach(pid_t pid) { return {bb::Vm::attach(pid).symbol_address("__jit_debug_descriptor")}; }

TEST(JitCodeLive, IndexesARunningVmAndFollowsCodeLoading) {
    Erl vm;
    bb::RemoteMemory mem(vm.pid());
    bb::JitCodeIndex idx(mem, attach(vm.pid()).descriptor, false);
    auto r = idx.refresh(now_ns());
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_TRUE(r.error.empty()) << r.error;
    EXPECT_GE(idx.module_count(), 90u);
    EXPECT_GE(idx.range_count(), 5000u);
    ASSERT_TRUE(idx.emulator());
    EXPECT_EQ(idx.emulator()->frame_layout, 0);
    EXPECT_NE(idx.emulator()->normal_exit, 0u);

    uint64_t t = now_ns();
    auto modules = sweep_modules(idx, vm.pid(), t);
    size_t ranges = 0, lines = 0;
    for (const auto& [base, m] : modules) {
        ranges += m->ranges.size();
        for (const auto& range : m->ranges) lines += range.lines.size();
    }
    std::cout << "live VM: " << idx.module_count() << " modules (" << modules.size()
              << " found by sweeping the JIT mappings), " << idx.range_count() << " ranges, " << lines
              << " line records\n";
    EXPECT_EQ(modules.size(), idx.module_count());
    EXPECT_EQ(ranges, idx.range_count());

    // The normal-exit stub is JIT code too (the VM's global code).
    auto exit_hit = idx.lookup(idx.emulator()->normal_exit, t);
    ASSERT_TRUE(exit_hit);
    std::cout << "normal exit is in " << exit_hit->module->name << ": " << exit_hit->range->name << "\n";

    auto [lists_base, lists] = module_named(modules, "lists");
    ASSERT_TRUE(lists);
    const bb::JitRange* foldl = range_named(*lists, "lists:foldl/3");
    ASSERT_TRUE(foldl);
    auto hit = idx.lookup(lists_base + foldl->start + (foldl->end - foldl->start) / 2, t);
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->range->name, "lists:foldl/3");
    EXPECT_EQ(hit->module->name, "lists");
    EXPECT_GT(hit->line, 0u);
    ASSERT_TRUE(hit->file);
    EXPECT_NE(hit->file->find("lists.erl"), std::string::npos) << *hit->file;

    // Lookup speed over addresses spread across all live ranges.
    std::mt19937_64 rng(7);
    std::vector<std::pair<uint64_t, const bb::JitRange*>> all;
    for (const auto& [base, m] : modules)
        for (const auto& range : m->ranges) all.push_back({base, &range});
    std::vector<uint64_t> addrs(1'000'000);
    for (auto& a : addrs) {
        auto [base, range] = all[rng() % all.size()];
        a = base + range->start + rng() % (range->end - range->start);
    }
    auto time_lookups = [&](const std::vector<uint64_t>& as) {
        size_t found = 0;
        auto t0 = std::chrono::steady_clock::now();
        for (uint64_t a : as) found += idx.lookup(a, t).has_value();
        auto ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0);
        EXPECT_EQ(found, as.size());
        return ns.count() / double(as.size());
    };
    double spread = time_lookups(addrs);
    // Samples concentrate on hot code: 1,000 distinct addresses.
    std::vector<uint64_t> hot(addrs.size());
    for (size_t i = 0; i < hot.size(); i++) hot[i] = addrs[rng() % 1000];
    double concentrated = time_lookups(hot);
    std::cout << "lookup: " << spread << " ns each over addresses spread across all ranges, " << concentrated
              << " ns over 1,000 hot addresses\n";

    // Code loaded now shows up at the next refresh.
    EXPECT_EQ(vm.eval("{code:is_loaded(sofs), code:ensure_loaded(sofs)}."), "result {false,{module,sofs}}");
    size_t before = idx.module_count();
    uint64_t gen = idx.generation();
    r = idx.refresh(now_ns());
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_GE(r.added, 1u);
    EXPECT_GE(idx.module_count(), before + 1);
    EXPECT_GT(idx.generation(), gen);
    modules = sweep_modules(idx, vm.pid(), now_ns());
    auto [sofs_base, sofs] = module_named(modules, "sofs");
    ASSERT_TRUE(sofs);
    const bb::JitRange* relation = range_named(*sofs, "sofs:relation/1");
    ASSERT_TRUE(relation);
    hit = idx.lookup(sofs_base + relation->start, now_ns());
    ASSERT_TRUE(hit);
    EXPECT_EQ(hit->range->name, "sofs:relation/1");
}

// The VM's perf map (+JPperf map) lists every range it registers: each must resolve to that name.
// On each test VM without frame pointers of its own (+JPperf map turns them on).
class JitCodeVmTest : public bbt::VmTest {};
std::vector<bbt::TestVm> vms_without_fp() {
    std::vector<bbt::TestVm> out;
    for (const auto& v : bbt::test_vms())
        if (!v.frame_pointers) out.push_back(v);
    return out;
}
INSTANTIATE_TEST_SUITE_P(Vms, JitCodeVmTest, ::testing::ValuesIn(vms_without_fp()), bbt::test_vm_name);

TEST_P(JitCodeVmTest, AgreesWithTheVmsPerfMap) {
    Erl vm(GetParam(), {"+JPperf", "map"});
    std::string map_path = "/tmp/perf-" + std::to_string(vm.pid()) + ".map";
    struct Cleanup {
        std::string path;
        ~Cleanup() { unlink(path.c_str()); }
    } cleanup{map_path};

    bb::RemoteMemory mem(vm.pid());
    bb::JitCodeIndex idx(mem, attach(vm.pid()).descriptor, false);
    auto r = idx.refresh(now_ns());
    ASSERT_TRUE(r.ok) << r.error;
    ASSERT_TRUE(idx.emulator());
    EXPECT_EQ(idx.emulator()->frame_layout, 1);  // +JPperf map turns on frame pointers

    std::ifstream map(map_path);
    ASSERT_TRUE(map) << map_path;
    uint64_t t = now_ns();
    size_t checked = 0, empty = 0, mismatched = 0;
    for (std::string line; std::getline(map, line);) {
        std::istringstream in(line);
        std::string addr_s, size_s, name;
        in >> addr_s >> size_s;
        std::getline(in >> std::ws, name);
        ASSERT_TRUE(name.starts_with("$")) << line;
        name.erase(0, 1);
        if (name.ends_with("-CodeInfoPrologue")) name.resize(name.size() - 17);
        uint64_t addr = std::stoull(addr_s, nullptr, 16), size = std::stoull(size_s, nullptr, 16);
        if (size == 0) {
            empty++;
            continue;
        }
        for (uint64_t a : {addr, addr + size - 1}) {
            auto hit = idx.lookup(a, t);
            if (!hit || hit->range->name != name) {
                if (mismatched++ < 5) ADD_FAILURE() << line << " -> " << (hit ? hit->range->name : "<none>");
            }
        }
        checked++;
    }
    std::cout << "perf map: " << checked << " ranges agree (" << empty << " empty ones skipped), " << idx.range_count()
              << " ranges indexed\n";
    EXPECT_EQ(mismatched, 0u);
    EXPECT_EQ(checked, idx.range_count());
}

TEST(NativeSymbolsLive, ResolvesBeamSmpAndLibc) {
    Erl vm;
    bb::ElfFile elf = bb::ElfFile::open(exe_of(vm.pid())).value_or_throw("");
    uint64_t bias = load_bias(vm.pid(), elf);
    bb::NativeSymbols syms(vm.pid());

    auto gc = elf.find("erts_garbage_collect");
    ASSERT_TRUE(gc);
    auto s = syms.lookup(bias + gc->value + 5);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->module, "beam.smp");
    EXPECT_EQ(s->name, "erts_garbage_collect");
    EXPECT_EQ(s->offset, 5u);

    bool saw_libc = false;
    for (const auto& m : mappings(vm.pid())) {
        if (m.perms[2] != 'x' || !m.path.ends_with("/libc.so.6")) continue;
        auto in_libc = syms.lookup(m.start + (m.end - m.start) / 2);
        ASSERT_TRUE(in_libc);
        EXPECT_EQ(in_libc->module, "libc.so.6");
        saw_libc = true;
        // Its debug file (libc6-dbg) spells it __pthread_mutex_lock@GLIBC_2.2.5: named without.
        auto lock = bb::ElfFile::open(m.path).value_or_throw("").find("__pthread_mutex_lock");
        ASSERT_TRUE(lock);
        if (lock->file_offset >= m.offset && lock->file_offset < m.offset + (m.end - m.start)) {
            auto named = syms.lookup(m.start + (lock->file_offset - m.offset) + 1);
            ASSERT_TRUE(named);
            EXPECT_EQ(named->name, "__pthread_mutex_lock");
        }
    }
    EXPECT_TRUE(saw_libc);
    EXPECT_FALSE(syms.lookup(0x10));

    EXPECT_NO_THROW(syms.refresh());
    s = syms.lookup(bias + gc->value);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->name, "erts_garbage_collect");
    EXPECT_EQ(s->offset, 0u);
}

// Two VMs of one build: each file's symbols are read once (by the inode both map), each VM's
// addresses resolve at its own load bias, and the last one gone releases them.
TEST(NativeSymbolsLive, VmsOfOneBuildShareEachFilesSymbols) {
    ASSERT_EQ(bb::NativeSymbols::files_held(), 0u);
    Erl a, b;
    bb::ElfFile elf = bb::ElfFile::open(exe_of(a.pid())).value_or_throw("");
    auto gc = elf.find("erts_garbage_collect");
    ASSERT_TRUE(gc);
    auto libc_middle = [](pid_t pid) {
        for (const auto& m : mappings(pid))
            if (m.perms[2] == 'x' && m.path.ends_with("/libc.so.6")) return m.start + (m.end - m.start) / 2;
        return uint64_t{0};
    };
    auto resolve = [&](pid_t pid, bb::NativeSymbols& syms) {
        auto s = syms.lookup(load_bias(pid, elf) + gc->value + 7);
        ASSERT_TRUE(s);
        EXPECT_EQ(s->name, "erts_garbage_collect");
        EXPECT_EQ(s->offset, 7u);
        auto c = syms.lookup(libc_middle(pid));
        ASSERT_TRUE(c);
        EXPECT_EQ(c->module, "libc.so.6");
    };
    {
        auto sa = std::make_unique<bb::NativeSymbols>(a.pid());
        resolve(a.pid(), *sa);
        const size_t one = bb::NativeSymbols::files_held();
        EXPECT_EQ(one, 2u);  // beam.smp and libc.so.6
        bb::NativeSymbols sb(b.pid());
        resolve(b.pid(), sb);
        EXPECT_NE(load_bias(a.pid(), elf), load_bias(b.pid(), elf));  // ASLR: the sharing is not by address
        EXPECT_EQ(bb::NativeSymbols::files_held(), one);
        sa.reset();
        EXPECT_EQ(bb::NativeSymbols::files_held(), one);  // b's still
        resolve(b.pid(), sb);
    }
    EXPECT_EQ(bb::NativeSymbols::files_held(), 0u);
}

}  // namespace jit_code_live_test
