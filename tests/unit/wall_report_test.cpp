// -e wall's top table: the table of called processes under the places, from the waiters'
// "[waiting for NAME, pid P]" leaves and the callee's own samples.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "profile/aggregate.hpp"
#include "profile/frames.hpp"
#include "report/report.hpp"
#include "report/text.hpp"

namespace wall_report_test {

using bb::Aggregator;
using bb::FrameKind;
using bb::FrameTable;

constexpr uint64_t kSecond = 1'000'000'000;

struct WallFixture {
    FrameTable frames;
    uint32_t waiting = frames.other(FrameKind::vm, "[waiting]", "beam.smp"),
             running = frames.other(FrameKind::vm, "[running]", "beam.smp"),
             run = frames.erlang("client:run/0", "client", nullptr, 0, 0),
             call = frames.erlang("gen_server:call/3", "gen_server", nullptr, 0, 0),
             do_call = frames.erlang("gen:do_call/4", "gen", nullptr, 0, 0),
             handle = frames.erlang("srv:handle_call/3", "srv", nullptr, 0, 0),
             loop = frames.erlang("srv:loop/0", "srv", nullptr, 0, 0),
             on_srv = frames.other(FrameKind::vm, "[waiting for srv, pid 0.90.0]", "beam.smp"),
             on_idle = frames.other(FrameKind::vm, "[waiting for pid 0.91.0]", "beam.smp"),
             unknown = frames.other(FrameKind::vm, "[waiting for ?]", "beam.smp"),
             queue = frames.other(FrameKind::vm, "[receive, queue 1-9]", "beam.smp");
    std::string top(const Aggregator& a, const bb::TopOptions& o = {}) const {
        bb::ProfileMeta m;
        m.unit = "wall";
        m.duration_ns = 2 * kSecond;
        m.pid_text = [](uint64_t pid) { return "<0." + std::to_string(pid >> 4) + ".0>"; };
        std::ostringstream out;
        bb::write_top(a.profile(frames, m), out, o);
        return out.str();
    }
};

// Six waiters on srv for the 2 s (a mean of 6 waiting), one on a process never sampled, one
// whose call was not found; srv itself running 3/4 of its time in handle_call/3.
TEST(WallReport, CalledProcessesByTheirWaiters) {
    WallFixture f;
    Aggregator a;
    for (uint64_t pid = 1; pid <= 6; pid++)
        a.add(std::vector<uint32_t>{f.waiting, f.run, f.call, f.do_call, f.on_srv}, 2 * kSecond,
              {.erl_pid = pid << 4 | 3});
    a.add(std::vector<uint32_t>{f.waiting, f.run, f.call, f.do_call, f.on_idle}, kSecond, {.erl_pid = 7 << 4 | 3});
    a.add(std::vector<uint32_t>{f.waiting, f.run, f.call, f.do_call, f.unknown}, kSecond, {.erl_pid = 8 << 4 | 3});
    a.add(std::vector<uint32_t>{f.running, f.loop, f.handle}, 3 * kSecond / 2, {.erl_pid = 90 << 4 | 3});
    a.add(std::vector<uint32_t>{f.waiting, f.loop, f.queue}, kSecond / 2, {.erl_pid = 90 << 4 | 3});
    const std::string top = f.top(a);
    EXPECT_NE(top.find("WAITERS  RUN%  CALLED PROCESS   MOST%  WHERE IT SPENDS MOST OF ITS OWN TIME\n"
                       "    6.0    75  srv, pid 0.90.0     75  [running] srv:handle_call/3 < srv:loop/0\n"
                       "    0.5     -  pid 0.91.0           -  (not sampled)\n"),
              std::string::npos)
        << top;
    EXPECT_EQ(top.find("waiting for ?, pid"), std::string::npos) << top;
}

// The table alone (hide_idle): the idle are out of the places and their shares, but a callee's
// own idle time is its own: srv idle half its time, running the other half.
TEST(WallReport, IdleHiddenFromThePlacesNotFromTheCallee) {
    WallFixture f;
    const uint32_t idle = f.frames.other(FrameKind::vm, std::string(bb::kIdleReceiveLeaf), "beam.smp");
    Aggregator a;
    a.add(std::vector<uint32_t>{f.waiting, f.run, f.call, f.do_call, f.on_srv}, 3 * kSecond, {.erl_pid = 1 << 4 | 3});
    a.add(std::vector<uint32_t>{f.running, f.loop, f.handle}, kSecond, {.erl_pid = 90 << 4 | 3});
    a.add(std::vector<uint32_t>{f.waiting, f.loop, idle}, kSecond, {.erl_pid = 90 << 4 | 3});
    const std::string top = f.top(a, {.hide_idle = true});
    EXPECT_NE(top.find("  75.0  [waiting]"), std::string::npos) << top;
    EXPECT_NE(top.find("  25.0  [running]"), std::string::npos) << top;
    EXPECT_EQ(top.find("[receive, queue 0]\n"), std::string::npos) << top;
    EXPECT_NE(top.find("    1.5    50  srv, pid 0.90.0"), std::string::npos) << top;
}

// In a terminal's width (TopOptions::columns), every row of both tables cut at its end.
TEST(WallReport, RowsFitTheColumns) {
    WallFixture f;
    Aggregator a;
    a.add(std::vector<uint32_t>{f.waiting, f.run, f.call, f.do_call, f.on_srv}, 2 * kSecond, {.erl_pid = 1 << 4 | 3});
    a.add(std::vector<uint32_t>{f.running, f.loop, f.handle}, kSecond, {.erl_pid = 90 << 4 | 3});
    const std::string top = f.top(a, {.columns = 50});
    std::istringstream lines(top);
    int cut = 0;
    for (std::string line; std::getline(lines, line);) {
        EXPECT_LE(line.size(), 50u) << line;
        cut += line.ends_with("...");
    }
    EXPECT_GE(cut, 2) << top;  // the waiters' row and the callee's
    EXPECT_NE(f.top(a).find("[waiting for srv, pid 0.90.0]\n"), std::string::npos) << "0: rows whole";
}

// No call waited on: no table of called processes.
TEST(WallReport, NoCalleeNoTable) {
    WallFixture f;
    Aggregator a;
    a.add(std::vector<uint32_t>{f.waiting, f.loop, f.queue}, kSecond, {.erl_pid = 90 << 4 | 3});
    EXPECT_EQ(f.top(a).find("CALLED PROCESS"), std::string::npos);
}

}  // namespace wall_report_test
