// The pprof writer: a gzip stream of a perftools.profiles.Profile whose tables refer to each
// other as profile.proto requires (the real consumer, go tool pprof, reads it in the
// integration tests).
#include <gtest/gtest.h>

#include <sstream>

#include "gunzip.hpp"
#include "profile.pb.h"
#include "report/pprof.hpp"

namespace {

bb::Profile two_stacks() {
    bb::Profile p;
    p.functions = {{bb::FrameKind::erlang, "MyApp.run/1", "'Elixir.MyApp':run/1", "lib/my_app.ex", 3,
                    "[JIT] Elixir.MyApp"},
                   {bb::FrameKind::erlang, "lists:foldl/3", "lists:foldl/3", "lists.erl", 1260, "[JIT] lists"},
                   {bb::FrameKind::native, "memcpy", "memcpy", "", 0, "libc.so.6"}};
    p.locations = {{0, 4}, {1, 1263}, {2, 0}};
    p.samples = {{{0, 1}, 7, "<0.85.0>", "my_worker", "scheduler 1"}, {{0, 2}, 3, "", "", "dirty cpu scheduler 2"}};
    p.period_ns = 1'001'001;
    p.start_unix_ns = 1'700'000'000'000'000'000;
    p.duration_ns = 2'000'000'000;
    p.title = "beam.smp 1 (OTP 27)";
    return p;
}

TEST(Pprof, TablesReferToEachOther) {
    std::ostringstream out;
    bb::write_pprof(two_stacks(), out);
    const auto pb = bbt::gunzip(out.str());
    ASSERT_TRUE(pb) << "not one whole gzip stream";
    perftools::profiles::Profile pp;
    ASSERT_TRUE(pp.ParseFromString(*pb));
    auto str = [&](int64_t i) { return pp.string_table(static_cast<int>(i)); };
    ASSERT_EQ(str(0), "");
    ASSERT_EQ(pp.sample_type_size(), 2);
    EXPECT_EQ(str(pp.sample_type(0).type()), "samples");
    EXPECT_EQ(str(pp.sample_type(0).unit()), "count");
    EXPECT_EQ(str(pp.sample_type(1).type()), "cpu");
    EXPECT_EQ(str(pp.sample_type(1).unit()), "nanoseconds");
    EXPECT_EQ(pp.period(), 1'001'001);
    EXPECT_EQ(pp.duration_nanos(), 2'000'000'000);
    EXPECT_EQ(str(pp.mapping(0).filename()), "beam.smp");  // the main binary first

    ASSERT_EQ(pp.sample_size(), 2);
    const auto& s = pp.sample(0);
    ASSERT_EQ(s.location_id_size(), 2);
    // Leaf first: location 2 (lists:foldl/3 at line 1263), then its caller.
    const auto& leaf = pp.location(static_cast<int>(s.location_id(0) - 1));
    EXPECT_EQ(leaf.id(), s.location_id(0));
    ASSERT_EQ(leaf.line_size(), 1);
    EXPECT_EQ(leaf.line(0).line(), 1263);
    const auto& fn = pp.function(static_cast<int>(leaf.line(0).function_id() - 1));
    EXPECT_EQ(str(fn.name()), "lists:foldl/3");
    EXPECT_EQ(str(fn.filename()), "lists.erl");
    EXPECT_EQ(fn.start_line(), 1260);
    EXPECT_EQ(str(pp.mapping(static_cast<int>(leaf.mapping_id() - 1)).filename()), "[JIT] lists");
    const auto& caller = pp.function(
        static_cast<int>(pp.location(static_cast<int>(s.location_id(1) - 1)).line(0).function_id() - 1));
    EXPECT_EQ(str(caller.name()), "MyApp.run/1");
    EXPECT_EQ(str(caller.system_name()), "'Elixir.MyApp':run/1");
    ASSERT_EQ(s.value_size(), 2);
    EXPECT_EQ(s.value(0), 7);
    EXPECT_EQ(s.value(1), 7 * 1'001'001);
    std::map<std::string, std::string> labels;
    for (const auto& l : s.label()) labels[str(l.key())] = str(l.str());
    EXPECT_EQ(labels, (std::map<std::string, std::string>{{"pid", "<0.85.0>"},
                                                          {"process", "my_worker"},
                                                          {"scheduler", "scheduler 1"}}));
    EXPECT_EQ(pp.sample(1).label_size(), 1);  // no process: the scheduler only
}

TEST(Pprof, CallsAreCountsOnly) {
    auto p = two_stacks();
    p.unit = "calls";
    p.period_ns = 0;
    std::ostringstream out;
    bb::write_pprof(p, out);
    const auto pb = bbt::gunzip(out.str());
    ASSERT_TRUE(pb) << "not one whole gzip stream";
    perftools::profiles::Profile pp;
    ASSERT_TRUE(pp.ParseFromString(*pb));
    ASSERT_EQ(pp.sample_type_size(), 1);
    EXPECT_EQ(pp.string_table(static_cast<int>(pp.sample_type(0).type())), "calls");
    EXPECT_EQ(pp.sample(0).value_size(), 1);
}

}  // namespace
