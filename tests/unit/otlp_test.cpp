// The OTLP writer: an ExportProfilesServiceRequest whose dictionary tables start with their
// empty element and refer to each other, read back with the generated classes (the integration
// test decodes the agent's requests with protoc).
#include <gtest/gtest.h>

#include "base/text.hpp"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"
#include "report/otlp.hpp"

namespace {

namespace pb = opentelemetry::proto::profiles::v1development;

TEST(Otlp, DictionaryFrameTypesMergedSamplesAndEscapedText) {
    const std::string hostile = "evil\x1b[31m\xff/0";
    bb::Profile p;
    auto fn = [&](bb::FrameKind kind, const std::string& name, const std::string& mapping) {
        p.functions.push_back({kind, name, name, "", 0, mapping});
        p.locations.push_back({static_cast<uint32_t>(p.functions.size() - 1), 0});
    };
    fn(bb::FrameKind::erlang, "lists:foldl/3", "[JIT] lists");  // location 0
    fn(bb::FrameKind::native, "memcpy", "libc.so.6");           // 1
    fn(bb::FrameKind::kernel, "do_syscall_64", "[kernel]");     // 2
    fn(bb::FrameKind::vm, "[gc]", "beam.smp");                  // 3
    fn(bb::FrameKind::erlang, hostile, "[JIT] evil");           // 4
    // Root first; the first two have one identity (stack and process): one OTLP sample.
    p.samples = {{{0, 1}, 2, "<0.85.0>", "my_worker", "scheduler 1"},
                 {{0, 1}, 3, "<0.85.0>", "my_worker", "scheduler 1"},
                 {{0, 3, 2}, 1, "", "", ""},
                 {{4}, 1, "<0.9.0>", hostile, "scheduler 2"}};
    p.period_ns = 1'001'001;
    p.start_unix_ns = 1'700'000'000'000'000'000;
    p.duration_ns = 2'000'000'000;

    opentelemetry::proto::collector::profiles::v1development::ExportProfilesServiceRequest req;
    // proto3 strings must be UTF-8: the parse fails if a target byte went through unescaped.
    ASSERT_TRUE(req.ParseFromString(bb::otlp_request(p, {{"service.name", "shop\x01"}, {"process.pid", int64_t{7}}})));

    const pb::ProfilesDictionary& d = req.dictionary();
    EXPECT_EQ(d.string_table(0), "");
    EXPECT_EQ(d.mapping_table(0).ByteSizeLong() + d.location_table(0).ByteSizeLong() +
                  d.function_table(0).ByteSizeLong() + d.attribute_table(0).ByteSizeLong() +
                  d.stack_table(0).ByteSizeLong(),
              0u);
    EXPECT_EQ(d.link_table(0).trace_id(), std::string(16, '\0'));
    EXPECT_EQ(d.link_table(0).span_id(), std::string(8, '\0'));
    auto str = [&](int32_t i) { return d.string_table(i); };
    auto attrs = [&](const auto& indices) {
        std::map<std::string, std::string> out;
        for (int32_t i : indices)
            out[str(d.attribute_table(i).key_strindex())] = d.attribute_table(i).value().string_value();
        return out;
    };
    // A stack's frames, leaf first, as "name:type".
    auto frames = [&](int32_t stack) {
        std::vector<std::string> out;
        for (int32_t l : d.stack_table(stack).location_indices()) {
            const pb::Location& loc = d.location_table(l);
            out.push_back(str(d.function_table(loc.lines(0).function_index()).name_strindex()) + ":" +
                          attrs(loc.attribute_indices())["profile.frame.type"]);
        }
        return out;
    };

    ASSERT_EQ(req.resource_profiles_size(), 1);
    const auto& res = req.resource_profiles(0).resource();
    ASSERT_EQ(res.attributes_size(), 2);
    EXPECT_EQ(res.attributes(0).value().string_value(), bb::printable("shop\x01"));
    EXPECT_EQ(res.attributes(1).value().int_value(), 7);
    const pb::Profile& prof = req.resource_profiles(0).scope_profiles(0).profiles(0);
    EXPECT_EQ(str(prof.sample_type().type_strindex()), "cpu");
    EXPECT_EQ(str(prof.sample_type().unit_strindex()), "nanoseconds");
    EXPECT_EQ(prof.period(), 1'001'001);
    EXPECT_EQ(prof.time_unix_nano(), 1'700'000'000'000'000'000u);

    ASSERT_EQ(prof.samples_size(), 3);
    EXPECT_EQ(prof.samples(0).values(0), 5 * 1'001'001);
    EXPECT_EQ(frames(prof.samples(0).stack_index()), (std::vector<std::string>{"memcpy:native", "lists:foldl/3:beam"}));
    EXPECT_EQ(attrs(prof.samples(0).attribute_indices()),
              (std::map<std::string, std::string>{{"beam.process.pid", "<0.85.0>"},
                                                  {"beam.process.name", "my_worker"},
                                                  {"thread.name", "scheduler 1"}}));
    EXPECT_EQ(frames(prof.samples(1).stack_index()),
              (std::vector<std::string>{"do_syscall_64:kernel", "[gc]:beam", "lists:foldl/3:beam"}));
    EXPECT_TRUE(prof.samples(1).attribute_indices().empty());
    EXPECT_EQ(frames(prof.samples(2).stack_index()), std::vector<std::string>{bb::printable(hostile) + ":beam"});
    EXPECT_EQ(attrs(prof.samples(2).attribute_indices())["beam.process.name"], bb::printable(hostile));
}

}  // namespace
