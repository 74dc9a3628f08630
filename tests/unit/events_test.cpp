// run/events.hpp: beam-bpf-sample's -e events, one entry each.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "profile/kinds.hpp"
#include "run/events.hpp"

namespace {

using namespace bb;

// Every event has one entry, found by its name, whose kind of profile exists; its own option is
// refused with any other event, and its resolve() sets what it defaults.
TEST(EventsTest, EachEventIsOneEntry) {
    std::set<std::string> names;
    for (const auto& m : event_modes()) {
        EXPECT_TRUE(names.insert(m.name).second) << m.name;
        EXPECT_EQ(&mode_of(m.event), &m) << m.name;
        EXPECT_EQ(mode_named(m.name), &m) << m.name;
        EXPECT_STREQ(event_name(m.event), m.name);
        EXPECT_EQ(kind_of(m.kind).unit, std::string(m.kind)) << m.name;
        EXPECT_NE(std::string(m.help), "") << m.name;
    }
    EXPECT_EQ(mode_named("cpu_clock"), nullptr);
    EXPECT_EQ(event_names(), "cpu-clock, cycles, alloc, alloc-gc, wall and offcpu");
    EXPECT_EQ(event_names(true, "or"), "cpu-clock or cycles");
}

TEST(EventsTest, AnOptionOfOneEventIsRefusedWithAnother) {
    CommonOptions o;
    o.threshold_us = 500;
    o.event = Event::wall;
    try {
        resolve(o);
        FAIL() << "--threshold with -e wall was taken";
    } catch (const UserError& e) {
        EXPECT_EQ(std::string(e.what()), "--threshold: only with -e offcpu");
    }
    o.event = Event::offcpu;
    EXPECT_NO_THROW(resolve(o));
    EXPECT_EQ(o.threshold_us, 500u);
}

TEST(EventsTest, EachEventAsksTheSamplerForItsOwn) {
    CommonOptions o;
    o.event = Event::offcpu;
    resolve(o);
    EXPECT_EQ(o.threshold_us, kOffcpuThresholdUs);
    SamplerConfig c = sampler_config(o);
    EXPECT_TRUE(c.offcpu);
    EXPECT_FALSE(c.alloc);
    EXPECT_EQ(c.offcpu_threshold_ns, 1000 * kOffcpuThresholdUs);

    CommonOptions a;
    a.event = Event::alloc;
    resolve(a);
    c = sampler_config(a);
    EXPECT_TRUE(c.alloc);
    EXPECT_EQ(c.alloc_interval, kAllocIntervalWords);
    EXPECT_EQ(a.ns_per_sample, 0u);

    CommonOptions cpu;
    resolve(cpu);
    EXPECT_EQ(cpu.ns_per_sample, 1'000'000'000ull / cpu.frequency);
    c = sampler_config(cpu);
    EXPECT_FALSE(c.alloc || c.offcpu || c.cycles);
}

}  // namespace
