#include "offsets.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>

extern "C" const unsigned bb_fixture_offsets[17];  // tests/unit/fixtures/vm_structs.c

namespace bb::detail {
std::span<const std::string_view> builtin_tables();  // generated from userspace/offsets/*.txt
}

namespace {

using bb::VmOffsets;

constexpr const char* kDebianBuildId = "94bcd90b66fca38e41e627fa3a2ec089b2e498be";
constexpr const char* kDebugVm =
    "/var/tmp/beam-bpf-otp/erlang-25.2.3+dfsg/bin/x86_64-pc-linux-gnu/beam.smp";
constexpr const char* kStrippedVm = "/usr/lib/erlang/erts-13.1.5/bin/beam.smp";

VmOffsets sample() {
    VmOffsets o;
    o.build_id = "00ff11ee";
    uint32_t v = 1;
    for (uint32_t* f : {&o.proc_id, &o.proc_htop, &o.proc_stop, &o.proc_frame_pointer, &o.proc_heap,
                        &o.proc_hend, &o.proc_i, &o.proc_current, &o.proc_size, &o.esd_registers,
                        &o.esd_no, &o.esd_type, &o.esd_current_process, &o.aligned_esd_size,
                        &o.regs_runtime_stack, &o.ptab_tab, &o.ptab_max})
        *f = v++ * 1000003u;  // distinct, and more than 16 bits
    return o;
}

// Replaces the first line starting with `key ` by `replacement` ("" drops it).
std::string with_line(std::string table, const std::string& key, const std::string& replacement) {
    size_t at = table.starts_with(key + " ") ? 0 : table.find("\n" + key + " ") + 1;
    size_t end = table.find('\n', at) + 1;
    return table.replace(at, end - at, replacement.empty() ? "" : replacement + "\n");
}

void expect_rejected(const std::string& text, const std::string& reason_part) {
    std::string err;
    EXPECT_FALSE(bb::parse_table(text, &err)) << text;
    EXPECT_NE(err.find(reason_part), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
}

TEST(OffsetsTable, RoundTrip) {
    VmOffsets o = sample();
    o.origin = "somewhere";
    std::string text = bb::format_table(o);
    std::string err;
    auto back = bb::parse_table(text, &err);
    ASSERT_TRUE(back) << err;
    o.origin.clear();  // a comment in the table, not a value
    EXPECT_EQ(*back, o);
    EXPECT_EQ(bb::format_table(*back), bb::format_table(o));
}

TEST(OffsetsTable, CommentsBlankLinesAndSpacing) {
    std::string text = "# a header\n\n  # indented comment\n" + bb::format_table(sample());
    text = with_line(text, "proc_heap", "proc_heap\t\t4000015\r");
    auto o = bb::parse_table(text, nullptr);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->proc_heap, 4000015u);
}

TEST(OffsetsTable, StrictErrors) {
    const std::string good = bb::format_table(sample());
    expect_rejected(with_line(good, "esd_no", ""), "missing key esd_no");
    expect_rejected(good + "esd_size 8\n", "unknown key esd_size");
    expect_rejected(good + "proc_htop 80\n", "duplicate key proc_htop");
    expect_rejected(with_line(good, "proc_htop", "proc_htop -1"), "bad number");
    expect_rejected(with_line(good, "proc_htop", "proc_htop 0x50"), "bad number");
    expect_rejected(with_line(good, "proc_htop", "proc_htop 80k"), "bad number");
    expect_rejected(with_line(good, "proc_htop", "proc_htop 4294967296"), "bad number");
    expect_rejected(with_line(good, "proc_htop", "proc_htop"), "expected");
    expect_rejected(with_line(good, "proc_htop", "proc_htop 80 # htop"), "expected");
    expect_rejected(with_line(good, "build_id", "build_id XYZ"), "bad build_id");
    expect_rejected(with_line(good, "build_id", ""), "build_id");
    expect_rejected("proc_id 0\n" + good, "first key must be build_id");
    expect_rejected("", "missing key build_id");
    expect_rejected("# only a comment\n", "missing key build_id");
}

TEST(OffsetsTable, GarbageNeverCrashes) {
    std::mt19937 rng(12345);
    const std::string good = bb::format_table(sample());
    for (int round = 0; round < 2000; round++) {
        std::string text;
        if (round % 2) {
            text.resize(rng() % 300);
            for (char& c : text) c = char(rng());
        } else {
            text = good;  // a valid table with a few bytes flipped
            for (int k = 0; k < 3; k++) text[rng() % text.size()] = char(rng());
        }
        std::string err;
        if (!bb::parse_table(text, &err)) {
            EXPECT_FALSE(err.empty());
        }
    }
}

// builtin_offsets() skips a table it cannot parse; this is where a bad one is caught.
TEST(BuiltinOffsets, EveryShippedTableParses) {
    std::set<std::string> ids;
    for (std::string_view text : bb::detail::builtin_tables()) {
        std::string err;
        auto o = bb::parse_table(text, &err);
        ASSERT_TRUE(o) << err << " in\n" << text;
        EXPECT_TRUE(ids.insert(o->build_id).second) << "two tables for " << o->build_id;
        EXPECT_TRUE(bb::builtin_offsets(o->build_id));
    }
    EXPECT_FALSE(ids.empty());
}

TEST(BuiltinOffsets, DebianOtp25TableHoldsCrossCheckValues) {
    auto o = bb::builtin_offsets(kDebianBuildId);
    ASSERT_TRUE(o) << "no built-in table for " << kDebianBuildId;
    EXPECT_EQ(o->build_id, kDebianBuildId);
    EXPECT_NE(o->origin.find("built-in"), std::string::npos);
    // From a -g build of the same source (see /work/shared/beam-internals.md and gdb ptype /o).
    EXPECT_EQ(o->proc_id, 0u);
    EXPECT_EQ(o->proc_htop, 80u);
    EXPECT_EQ(o->proc_stop, 88u);
    EXPECT_EQ(o->proc_frame_pointer, 96u);
    EXPECT_EQ(o->proc_heap, 128u);
    EXPECT_EQ(o->proc_hend, 136u);
    EXPECT_EQ(o->proc_i, 256u);
    EXPECT_EQ(o->proc_current, 472u);
    EXPECT_EQ(o->proc_size, 776u);
    EXPECT_EQ(o->esd_registers, 0u);
    EXPECT_EQ(o->esd_current_process, 168u);
    EXPECT_EQ(o->esd_type, 176u);
    EXPECT_EQ(o->esd_no, 184u);
    EXPECT_EQ(o->aligned_esd_size, 41728u);
    EXPECT_EQ(o->regs_runtime_stack, 0u);
    EXPECT_EQ(o->ptab_tab, 192u);
    EXPECT_EQ(o->ptab_max, 208u);

    std::string upper = kDebianBuildId;
    for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
    EXPECT_TRUE(bb::builtin_offsets(upper));
    EXPECT_FALSE(bb::builtin_offsets("0123456789abcdef"));
    EXPECT_FALSE(bb::builtin_offsets(""));
}

TEST(OffsetsFromDwarf, FixtureStructsInThisBinary) {
    std::string err;
    auto o = bb::offsets_from_dwarf("/proc/self/exe", &err);
    ASSERT_TRUE(o) << err;
    const uint32_t* want = bb_fixture_offsets;
    EXPECT_EQ(o->proc_id, want[0]);
    EXPECT_EQ(o->proc_htop, want[1]);
    EXPECT_EQ(o->proc_stop, want[2]);
    EXPECT_EQ(o->proc_frame_pointer, want[3]);
    EXPECT_EQ(o->proc_heap, want[4]);
    EXPECT_EQ(o->proc_hend, want[5]);
    EXPECT_EQ(o->proc_i, want[6]);
    EXPECT_EQ(o->proc_current, want[7]);
    EXPECT_EQ(o->proc_size, want[8]);
    EXPECT_EQ(o->esd_registers, want[9]);
    EXPECT_EQ(o->esd_no, want[10]);
    EXPECT_EQ(o->esd_type, want[11]);
    EXPECT_EQ(o->esd_current_process, want[12]);
    EXPECT_EQ(o->aligned_esd_size, want[13]);
    EXPECT_EQ(o->regs_runtime_stack, want[14]);
    EXPECT_EQ(o->ptab_tab, want[15]);
    EXPECT_EQ(o->ptab_max, want[16]);
    EXPECT_NE(o->proc_id, 0u);  // the fixture puts it deep enough to test that offsets add up
    EXPECT_FALSE(o->build_id.empty());
    EXPECT_NE(o->origin.find("/proc/self/exe"), std::string::npos);
}

TEST(OffsetsFromDwarf, StrippedVmSaysWhatIsMissing) {
    ASSERT_TRUE(std::filesystem::exists(kStrippedVm)) << kStrippedVm << " is not installed (scripts/setup.sh installs erlang-base)";
    std::string err;
    EXPECT_FALSE(bb::offsets_from_dwarf(kStrippedVm, &err));
    EXPECT_NE(err.find("no usable DWARF"), std::string::npos) << err;
    // It names the separate debug file it looked for: .build-id/94/bcd90b66....debug
    EXPECT_NE(err.find(std::string(kDebianBuildId + 2) + ".debug"), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
}

TEST(OffsetsFromDwarf, NotAnElfFile) {
    std::string err;
    EXPECT_FALSE(bb::offsets_from_dwarf("/proc/self/cmdline", &err));
    EXPECT_FALSE(err.empty());
    EXPECT_FALSE(bb::offsets_from_dwarf("/nonexistent/beam.smp", &err));
    EXPECT_NE(err.find("/nonexistent/beam.smp"), std::string::npos) << err;
}

TEST(OffsetsFromDwarf, DebugVmBuildMatchesBuiltinTable) {
    // The shipped table must be what the DWARF pipeline makes from source: scripts/test.sh
    // builds this VM first, so CI checks that end to end.
    ASSERT_TRUE(std::filesystem::exists(kDebugVm))
        << "no -g VM build at " << kDebugVm << " (scripts/build-debug-vm.sh makes one)";
    std::string err;
    auto from_dwarf = bb::offsets_from_dwarf(kDebugVm, &err);
    ASSERT_TRUE(from_dwarf) << err;
    auto builtin = bb::builtin_offsets(kDebianBuildId);
    ASSERT_TRUE(builtin);
    // The -g build has its own build-id; the layout is what must agree.
    from_dwarf->build_id = builtin->build_id;
    from_dwarf->origin = builtin->origin;
    EXPECT_EQ(bb::format_table(*from_dwarf), bb::format_table(*builtin));
}

}  // namespace
