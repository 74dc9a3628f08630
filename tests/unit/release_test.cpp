#include "target/release.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>

namespace {

std::optional<bb::VmBuild> parse(const std::string& bytes) {
    return bb::read_vm_build(std::span(bytes.data(), bytes.size()));
}

// As the string sits in a binary: other text around it, NUL-terminated, a newline at its end.
std::string in_binary(const std::string& version) {
    return std::string("\0junk Erlang/OTP is great\0", 26) + version + "\n" + std::string("\0more", 5);
}

TEST(VmBuild, Otp25DebianString) {
    auto b = parse(
        in_binary("Erlang/OTP 25%s [erts-13.1.5] [source] [64-bit] [smp:%beu:%beu] "
                  "[ds:%beu:%beu:%beu] [async-threads:%d] [jit:ns%s]"));
    ASSERT_TRUE(b);
    EXPECT_EQ(b->otp_release, 25);
    EXPECT_EQ(b->erts_version, "13.1.5");
    EXPECT_EQ(b->flavor, "jit");
    EXPECT_TRUE(b->native_stack);
    EXPECT_TRUE(b->bits64);
    EXPECT_EQ(b->features, "");
    EXPECT_EQ(b->describe(), "OTP 25 (erts-13.1.5, jit)");
}

TEST(VmBuild, FeaturesThatMoveFieldsAreKeptSorted) {
    auto b = parse(
        in_binary("Erlang/OTP 27%s [erts-15.2.7] [source] [64-bit] [smp:%beu:%beu] "
                  "[ds:%beu:%beu:%beu] [async-threads:%d] [jit:ns%s] [lock-counting] [dtrace] "
                  "[frame-pointer]"));
    ASSERT_TRUE(b);
    EXPECT_EQ(b->otp_release, 27);
    EXPECT_EQ(b->features, "dtrace,lock-counting");  // [frame-pointer] moves nothing
}

TEST(VmBuild, InterpreterHasNoJitTag) {
    auto b = parse(
        in_binary("Erlang/OTP 26%s [erts-14.2] [source] [64-bit] [smp:%beu:%beu] "
                  "[ds:%beu:%beu:%beu] [async-threads:%d]"));
    ASSERT_TRUE(b);
    EXPECT_EQ(b->flavor, "emu");
    EXPECT_FALSE(b->native_stack);
}

TEST(VmBuild, TheRealBinaries) {
    // Debian's stripped OTP 25, and the OTP 27 test VMs (scripts/build-test-vms.sh).
    for (auto [path, release, features] :
         {std::tuple{"/usr/lib/erlang/erts-13.1.5/bin/beam.smp", 25, ""},
          std::tuple{"/var/tmp/beam-bpf-otp27/debug/beam.smp", 27, ""},
          std::tuple{"/var/tmp/beam-bpf-otp27/debug/beam.lcnt.smp", 27, "lock-counting"}}) {
        ASSERT_TRUE(std::filesystem::exists(path)) << path;
        auto b = bb::read_vm_build_file(path);
        ASSERT_TRUE(b) << path;
        EXPECT_EQ(b->otp_release, release) << path;
        EXPECT_EQ(b->features, features) << path;
        EXPECT_EQ(b->flavor, "jit") << path;
    }
    EXPECT_FALSE(bb::read_vm_build_file("/nonexistent/beam.smp"));
}

TEST(VmBuild, GarbageNeverCrashes) {
    EXPECT_FALSE(parse(""));
    EXPECT_FALSE(parse("Erlang/OTP "));
    EXPECT_FALSE(parse("Erlang/OTP 27%s [erts-"));
    EXPECT_FALSE(parse("Erlang/OTP 27%s [source]"));   // no erts version
    EXPECT_FALSE(parse("Erlang/OTP 27 [erts-15.2]"));  // not the format string
    std::mt19937 rng(7);
    const std::string good = "Erlang/OTP 27%s [erts-15.2.7] [64-bit] [jit:ns%s]";
    for (int round = 0; round < 5000; round++) {
        std::string s = good;
        for (int k = 0; k < 3; k++) s[rng() % s.size()] = char(rng());
        parse(s);  // any answer, no crash
    }
}

TEST(ThreadNaming, BothConventionsAndTruncation) {
    const auto* r25 = bb::find_release(25);
    const auto* r27 = bb::find_release(27);
    ASSERT_TRUE(r25 && r27);
    EXPECT_EQ(r25->normal.number("3_scheduler"), 3);
    EXPECT_EQ(r25->dirty_cpu.number("10_dirty_cpu_sc"), 10);  // cut to 15 characters
    EXPECT_EQ(r25->dirty_io.number("2_dirty_io_sche"), 2);
    EXPECT_EQ(r25->normal.number("3_dirty_cpu_sch"), 0);
    EXPECT_EQ(r25->normal.number("erts_sched_3"), 0);
    EXPECT_EQ(r27->normal.number("erts_sched_3"), 3);
    EXPECT_EQ(r27->dirty_cpu.number("erts_dcpus_12"), 12);
    EXPECT_EQ(r27->dirty_io.number("erts_dios_1"), 1);
    EXPECT_EQ(r27->normal.number("erts_sched_"), 0);
    EXPECT_EQ(r27->normal.number("erts_sched_3x"), 0);
    EXPECT_EQ(r27->normal.number("3_scheduler"), 0);
    EXPECT_EQ(r27->dirty_io.number("erts_aux_1"), 0);
}

TEST(Releases, SupportedRange) {
    for (int major : {25, 26, 27, 28, 29}) EXPECT_TRUE(bb::find_release(major)) << major;
    for (int major : {0, 24, 30}) EXPECT_FALSE(bb::find_release(major)) << major;
    EXPECT_EQ(bb::find_release(25)->support, bb::Support::Tested);
    EXPECT_EQ(bb::find_release(27)->support, bb::Support::Tested);
    EXPECT_EQ(bb::find_release(28)->support, bb::Support::Described);
    EXPECT_EQ(bb::find_release(29)->support, bb::Support::Tested);
}

}  // namespace
