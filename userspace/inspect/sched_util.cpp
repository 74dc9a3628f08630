#include "inspect/sched_util.hpp"

#include <time.h>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <random>
#include <thread>

#include "base/clock.hpp"
#include "beam_bpf.h"

namespace bb {

namespace {
constexpr uint64_t kIdle = ~uint64_t{0};  // ERTS_SCHED_WTIME_IDLE
constexpr int kSampleHz = 1000;
}  // namespace

uint64_t dirty_busy_ns(const WallTimeCopy& c, uint64_t now_ns) {
    uint64_t busy = c.working_total;
    if (c.working_start != kIdle && now_ns > c.start && now_ns - c.start > c.working_start)
        busy += now_ns - c.start - c.working_start;
    return busy;
}

SchedUtil::SchedUtil(const Vm& vm) : vm_(vm), scheds_(vm.sched_threads()) {
    std::sort(scheds_.begin(), scheds_.end(), [](const SchedThread& a, const SchedThread& b) {
        return std::pair(a.sched.type, a.sched.no) < std::pair(b.sched.type, b.sched.no);
    });
}

std::optional<WallTimeCopy> SchedUtil::wall_time(uint64_t esdp) const {
    const VmOffsets& o = vm_.offsets();
    // Under the sequence number: an even one, the same before and after the counters.
    for (int attempt = 0; attempt < 100; attempt++) {
        WallTimeCopy c;
        auto mod = vm_.mem().read<uint32_t>(esdp + o.esd_swt_mod);
        auto enabled = vm_.mem().read<int32_t>(esdp + o.esd_swt_enabled);
        auto start = vm_.mem().read<uint64_t>(esdp + o.esd_swt_start);
        auto total = vm_.mem().read<uint64_t>(esdp + o.esd_swt_total);
        auto working = vm_.mem().read<uint64_t>(esdp + o.esd_swt_working);
        auto again = vm_.mem().read<uint32_t>(esdp + o.esd_swt_mod);
        if (!mod || !enabled || !start || !total || !working || !again) return std::nullopt;
        if ((*mod & 1) || *mod != *again) continue;
        c.mod = *mod, c.enabled = *enabled, c.start = *start, c.working_total = *total, c.working_start = *working;
        return c;
    }
    return std::nullopt;
}

std::vector<SchedBusy> SchedUtil::watch(double seconds, const std::function<bool()>& stop) {
    const VmOffsets& o = vm_.offsets();
    struct Watched {
        const SchedThread* t;
        uint64_t busy = 0, samples = 0, dirty_from = 0;
        bool ok = true;
    };
    std::vector<Watched> w;
    for (const SchedThread& t : scheds_) w.push_back({&t});
    const uint64_t t0 = monotonic_ns();
    for (Watched& x : w) {
        if (x.t->sched.type == BB_SCHED_NORMAL) continue;
        auto c = wall_time(x.t->sched.esdp);
        x.ok = c && c->enabled;
        if (x.ok) x.dirty_from = dirty_busy_ns(*c, t0);
    }
    std::mt19937_64 rng(std::random_device{}());
    std::uniform_int_distribution<uint64_t> gap(500'000'000ull / kSampleHz, 1'500'000'000ull / kSampleHz);
    const uint64_t end = t0 + static_cast<uint64_t>(seconds * 1e9);
    for (uint64_t next = t0 + gap(rng); next < end && !(stop && stop()); next += gap(rng)) {
        timespec ts{static_cast<time_t>(next / 1'000'000'000ull), static_cast<long>(next % 1'000'000'000ull)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
        for (Watched& x : w) {
            if (x.t->sched.type != BB_SCHED_NORMAL || !x.ok) continue;
            auto active = vm_.mem().read<int32_t>(x.t->sched.esdp + o.esd_active);
            if (!active) {
                x.ok = false;
                continue;
            }
            x.samples++;
            x.busy += *active != 0;
        }
    }
    const uint64_t t1 = monotonic_ns();
    std::vector<SchedBusy> out;
    for (Watched& x : w) {
        SchedBusy b{x.t->sched.type, x.t->sched.no, 0, x.samples};
        if (x.t->sched.type == BB_SCHED_NORMAL) {
            if (!x.ok || !x.samples) continue;
            b.busy = static_cast<double>(x.busy) / static_cast<double>(x.samples);
        } else {
            auto c = x.ok ? wall_time(x.t->sched.esdp) : std::nullopt;
            if (!c || t1 <= t0) continue;
            const uint64_t to = dirty_busy_ns(*c, t1);
            b.busy = to >= x.dirty_from ? std::min(1.0, static_cast<double>(to - x.dirty_from) / (t1 - t0)) : 0;
        }
        out.push_back(b);
    }
    return out;
}

std::string SchedUtil::line(const std::vector<SchedBusy>& s) {
    std::string out;
    for (uint8_t type : {uint8_t{BB_SCHED_NORMAL}, uint8_t{BB_SCHED_DIRTY_CPU}, uint8_t{BB_SCHED_DIRTY_IO}}) {
        std::string part;
        for (const SchedBusy& b : s)
            if (b.type == type) part += fmt::format("{}{} {:.0f}%", part.empty() ? "" : "  ", b.no, 100 * b.busy);
        if (part.empty()) continue;
        const char* kind = type == BB_SCHED_NORMAL ? "normal" : type == BB_SCHED_DIRTY_CPU ? "dirty cpu" : "dirty io";
        out += fmt::format("{}{} {}", out.empty() ? "" : " | ", kind, part);
    }
    return out;
}

}  // namespace bb
