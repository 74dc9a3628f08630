#include "target/offsets.hpp"
#include "target/offsets_dwarf.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <tuple>
#include <vector>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>

extern "C" const unsigned bb_fixture_offsets[BB_VM_FIELD_COUNT];  // tests/unit/fixtures/vm_structs.c

namespace {

using bb::VmOffsets;

constexpr const char* kDebianBuildId = "94bcd90b66fca38e41e627fa3a2ec089b2e498be";
constexpr const char* kDebugVm = "/var/tmp/beam-bpf-otp/erlang-25.2.3+dfsg/bin/x86_64-pc-linux-gnu/beam.smp";
// scripts/build-test-vms.sh keeps the unstripped OTP 27 builds here before stripping.
constexpr const char* kDebugVm27 = "/var/tmp/beam-bpf-otp27/debug/beam.smp";
constexpr const char* kDebugVm27Lcnt = "/var/tmp/beam-bpf-otp27/debug/beam.lcnt.smp";
// scripts/build-test-vms.sh 29 keeps the OTP 29 build as `make install` left it (-g).
constexpr const char* kDebugVm29 = "/var/tmp/beam-bpf-otp29/debug/beam.smp";

// The fields in field-list order, as pointers into o.
std::vector<uint32_t*> all_fields(VmOffsets& o) {
    return {
#define BB_TEST_FIELD(field, type, member) &o.field,
        BB_VM_FIELDS(BB_TEST_FIELD)
#undef BB_TEST_FIELD
    };
}
constexpr const char* kStrippedVm = "/usr/lib/erlang/erts-13.1.5/bin/beam.smp";

VmOffsets sample() {
    VmOffsets o;
    o.otp_release = "27";
    o.features = "dtrace,lock-counting";
    o.build_id = "00ff11ee";
    uint32_t v = 1;
    for (uint32_t* f : all_fields(o)) *f = v++ * 1000003u;  // distinct, and more than 16 bits
    return o;
}

// Replaces the first line starting with `key ` by `replacement` ("" drops it).
std::string with_line(std::string table, const std::string& key, const std::string& replacement) {
    size_t at = table.starts_with(key + " ") ? 0 : table.find("\n" + key + " ") + 1;
    size_t end = table.find('\n', at) + 1;
    return table.replace(at, end - at, replacement.empty() ? "" : replacement + "\n");
}

void expect_rejected(const std::string& text, const std::string& reason_part) {
    auto r = bb::parse_table(text);
    EXPECT_FALSE(r) << text;
    const std::string& err = r.error();
    EXPECT_NE(err.find(reason_part), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
}

TEST(OffsetsTable, RoundTrip) {
    VmOffsets o = sample();
    o.origin = "somewhere";
    std::string text = bb::format_table(o);
    auto back = bb::parse_table(text);
    ASSERT_TRUE(back) << back.error();
    o.origin.clear();  // a comment in the table, not a value
    EXPECT_EQ(*back, o);
    EXPECT_EQ(bb::format_table(*back), bb::format_table(o));
}

TEST(OffsetsTable, CommentsBlankLinesAndSpacing) {
    std::string text = "# a header\n\n  # indented comment\n" + bb::format_table(sample());
    text = with_line(text, "proc_heap", "proc_heap\t\t4000015\r");
    auto o = bb::parse_table(text);
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
    expect_rejected(with_line(good, "otp_release", "otp_release 27a"), "bad otp_release");
    expect_rejected(with_line(good, "features", "features Lock"), "bad features");
    expect_rejected(with_line(good, "features", "features a,,b"), "bad features");
    expect_rejected(with_line(good, "features", ""), "missing key features");
    expect_rejected("proc_id 0\n" + good, "first key must be otp_release");
    expect_rejected("", "missing key otp_release");
    expect_rejected("# only a comment\n", "missing key otp_release");
    // build_id is optional: a table for every build of a release and its features.
    auto any_build = bb::parse_table(with_line(good, "build_id", ""));
    ASSERT_TRUE(any_build);
    EXPECT_TRUE(any_build->build_id.empty());
    auto plain = bb::parse_table(with_line(good, "features", "features -"));
    ASSERT_TRUE(plain);
    EXPECT_EQ(plain->features, "");
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
        auto r = bb::parse_table(text);
        if (!r) {
            EXPECT_FALSE(r.error().empty());
        }
    }
}

// builtin_tables() leaves out a table it cannot parse; this is where a bad one is caught.
TEST(BuiltinOffsets, EveryShippedTableParses) {
    std::set<std::pair<std::string, std::string>> keys;
    auto files = std::filesystem::directory_iterator(BB_SOURCE_DIR "/userspace/target/offsets");
    size_t n = 0;
    for (const auto& f : files) {
        std::ifstream in(f.path());
        std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        auto o = bb::parse_table(text);
        ASSERT_TRUE(o) << o.error() << " in " << f.path();
        EXPECT_TRUE(keys.insert({o->otp_release, o->features}).second)
            << "two tables for OTP " << o->otp_release << " " << o->features;
        n++;
    }
    EXPECT_EQ(bb::builtin_tables().size(), n);
    EXPECT_GE(n, 4u);  // OTP 25, OTP 27, OTP 27 with lock counting, OTP 29
}

void expect_otp25_cross_check_values(const VmOffsets& o) {
    // From a -g build of the same source (see /work/shared/beam-internals.md and gdb ptype /o).
    EXPECT_EQ(o.proc_id, 0u);
    EXPECT_EQ(o.proc_htop, 80u);
    EXPECT_EQ(o.proc_stop, 88u);
    EXPECT_EQ(o.proc_heap, 128u);
    EXPECT_EQ(o.proc_hend, 136u);
    EXPECT_EQ(o.proc_i, 256u);
    EXPECT_EQ(o.proc_current, 472u);
    EXPECT_EQ(o.proc_scheduler_data, 760u);
    EXPECT_EQ(o.proc_size, 776u);
    EXPECT_EQ(o.esd_registers, 0u);
    EXPECT_EQ(o.esd_current_process, 168u);
    EXPECT_EQ(o.esd_type, 176u);
    EXPECT_EQ(o.esd_no, 184u);
    EXPECT_EQ(o.aligned_esd_size, 41728u);
    EXPECT_EQ(o.regs_runtime_stack, 0u);
    EXPECT_EQ(o.ptab_tab, 192u);
    EXPECT_EQ(o.ptab_max, 208u);
}

TEST(BuiltinOffsets, ChosenByReleaseFeaturesAndBuildId) {
    auto o = bb::builtin_offsets("25", "", kDebianBuildId);
    ASSERT_TRUE(o);
    EXPECT_EQ(o->build_id, kDebianBuildId);
    EXPECT_NE(o->origin.find("built-in"), std::string::npos);
    expect_otp25_cross_check_values(*o);
    // Any other build of OTP 25 without layout-changing features gets the same table.
    auto other = bb::builtin_offsets("25", "", "0123456789abcdef");
    ASSERT_TRUE(other);
    EXPECT_TRUE(other->same_values(*o));

    auto o27 = bb::builtin_offsets("27", "", "");
    auto lcnt = bb::builtin_offsets("27", "lock-counting", "");
    ASSERT_TRUE(o27);
    ASSERT_TRUE(lcnt);
    EXPECT_FALSE(o27->same_values(*lcnt)) << "lock counting moves fields: the tables must differ";
    EXPECT_EQ(lcnt->proc_scheduler_data, o27->proc_scheduler_data + 8);  // after the bigger lock
    EXPECT_FALSE(bb::builtin_offsets("27", "dtrace", ""));
    EXPECT_FALSE(bb::builtin_offsets("24", "", ""));
}

TEST(OffsetsFromDwarf, FixtureStructsInThisBinary) {
    auto o = bb::offsets_from_dwarf("/proc/self/exe");
    ASSERT_TRUE(o) << o.error();
    auto got = all_fields(*o);
    for (size_t i = 0; i < got.size(); i++) EXPECT_EQ(*got[i], bb_fixture_offsets[i]) << "field " << i;
    EXPECT_NE(o->proc_id, 0u);  // the fixture puts it deep enough to test that offsets add up
    EXPECT_FALSE(o->build_id.empty());
    EXPECT_NE(o->origin.find("/proc/self/exe"), std::string::npos);
}

TEST(OffsetsFromDwarf, StrippedVmSaysWhatIsMissing) {
    ASSERT_TRUE(std::filesystem::exists(kStrippedVm))
        << kStrippedVm << " is not installed (scripts/setup.sh installs erlang-base)";
    auto r = bb::offsets_from_dwarf(kStrippedVm);
    EXPECT_FALSE(r);
    const std::string& err = r.error();
    EXPECT_NE(err.find("no usable DWARF"), std::string::npos) << err;
    // It names the separate debug file it looked for: .build-id/94/bcd90b66....debug
    EXPECT_NE(err.find(std::string(kDebianBuildId + 2) + ".debug"), std::string::npos) << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
}

TEST(OffsetsFromDwarf, NotAnElfFile) {
    EXPECT_FALSE(bb::offsets_from_dwarf("/proc/self/cmdline").error().empty());
    auto missing = bb::offsets_from_dwarf("/nonexistent/beam.smp");
    EXPECT_FALSE(missing);
    EXPECT_NE(missing.error().find("/nonexistent/beam.smp"), std::string::npos) << missing.error();
}

// The shipped tables must be what the DWARF pipeline makes from source: scripts/test.sh builds
// these VMs first (build-debug-vm.sh, build-test-vms.sh), so CI checks that end to end.
class ShippedTable : public ::testing::TestWithParam<std::tuple<const char*, const char*, const char*>> {};

TEST_P(ShippedTable, MatchesDwarfOfItsBuild) {
    auto [path, release, features] = GetParam();
    ASSERT_TRUE(std::filesystem::exists(path))
        << "no -g VM build at " << path << " (scripts/build-debug-vm.sh and build-test-vms.sh make them)";
    auto from_dwarf = bb::offsets_from_dwarf(path);
    ASSERT_TRUE(from_dwarf) << from_dwarf.error();
    auto builtin = bb::builtin_offsets(release, features, "");
    ASSERT_TRUE(builtin) << "no shipped table for OTP " << release << " " << features;
    EXPECT_EQ(bb::format_table(*from_dwarf).substr(bb::format_table(*from_dwarf).find("proc_id")),
              bb::format_table(*builtin).substr(bb::format_table(*builtin).find("proc_id")));
}

INSTANTIATE_TEST_SUITE_P(Releases, ShippedTable,
                         ::testing::Values(std::tuple{kDebugVm, "25", ""}, std::tuple{kDebugVm27, "27", ""},
                                           std::tuple{kDebugVm27Lcnt, "27", "lock-counting"},
                                           std::tuple{kDebugVm29, "29", ""}),
                         [](const auto& info) {
                             return std::string("otp") + std::get<1>(info.param) +
                                    (*std::get<2>(info.param) ? "_lcnt" : "");
                         });

}  // namespace
