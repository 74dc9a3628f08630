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
}  // namespace

uint64_t dirty_busy_ns(const WallTimeCopy& c, uint64_t now_ns) {
    uint64_t busy = c.working_total;
    if (c.working_start != kIdle && now_ns > c.start && now_ns - c.start > c.working_start)
        busy += now_ns - c.start - c.working_start;
    return busy;
}

SchedUtil::SchedUtil(const Vm& vm)
    : mem_(vm.mem()),
      esd_active_(vm.offsets().esd_active),
      esd_swt_mod_(vm.offsets().esd_swt_mod),
      esd_swt_enabled_(vm.offsets().esd_swt_enabled),
      esd_swt_start_(vm.offsets().esd_swt_start),
      esd_swt_total_(vm.offsets().esd_swt_total),
      esd_swt_working_(vm.offsets().esd_swt_working) {
    for (const SchedThread& t : vm.sched_threads()) w_.push_back({t.sched.type, t.sched.no, t.sched.esdp});
    std::sort(w_.begin(), w_.end(),
              [](const Watched& a, const Watched& b) { return std::pair(a.type, a.no) < std::pair(b.type, b.no); });
    std::lock_guard g(mu_);
    start_interval();
}

std::optional<WallTimeCopy> SchedUtil::wall_time(uint64_t esdp) const {
    // Under the sequence number: an even one, the same before and after the counters.
    for (int attempt = 0; attempt < 100; attempt++) {
        WallTimeCopy c;
        auto mod = mem_.read<uint32_t>(esdp + esd_swt_mod_);
        auto enabled = mem_.read<int32_t>(esdp + esd_swt_enabled_);
        auto start = mem_.read<uint64_t>(esdp + esd_swt_start_);
        auto total = mem_.read<uint64_t>(esdp + esd_swt_total_);
        auto working = mem_.read<uint64_t>(esdp + esd_swt_working_);
        auto again = mem_.read<uint32_t>(esdp + esd_swt_mod_);
        if (!mod || !enabled || !start || !total || !working || !again) return std::nullopt;
        if ((*mod & 1) || *mod != *again) continue;
        c.mod = *mod, c.enabled = *enabled, c.start = *start, c.working_total = *total, c.working_start = *working;
        return c;
    }
    return std::nullopt;
}

void SchedUtil::start_interval() {
    t0_ = monotonic_ns();
    for (Watched& x : w_) {
        x.busy = x.samples = 0;
        if (x.type == BB_SCHED_NORMAL || !x.ok) continue;
        auto c = wall_time(x.esdp);
        x.ok = c && c->enabled;
        if (x.ok) x.dirty_from = dirty_busy_ns(*c, t0_);
    }
}

void SchedUtil::sample() {
    std::lock_guard g(mu_);
    for (Watched& x : w_) {
        if (x.type != BB_SCHED_NORMAL || !x.ok) continue;
        auto active = mem_.read<int32_t>(x.esdp + esd_active_);
        if (!active) {
            x.ok = false;
            continue;
        }
        x.samples++;
        x.busy += *active != 0;
    }
}

std::vector<SchedBusy> SchedUtil::take() {
    std::lock_guard g(mu_);
    const uint64_t t1 = monotonic_ns();
    std::vector<SchedBusy> out;
    for (Watched& x : w_) {
        SchedBusy b{x.type, x.no, 0, x.samples};
        if (!x.ok) continue;
        if (x.type == BB_SCHED_NORMAL) {
            if (!x.samples) continue;
            b.busy = static_cast<double>(x.busy) / static_cast<double>(x.samples);
        } else {
            auto c = wall_time(x.esdp);
            if (!c || t1 <= t0_) continue;
            const uint64_t to = dirty_busy_ns(*c, t1);
            b.busy = to >= x.dirty_from ? std::min(1.0, static_cast<double>(to - x.dirty_from) / (t1 - t0_)) : 0;
        }
        out.push_back(b);
    }
    start_interval();
    return out;
}

uint64_t SchedUtil::next_gap_ns(std::mt19937_64& rng, int hz) {
    return std::uniform_int_distribution<uint64_t>(500'000'000ull / hz, 1'500'000'000ull / hz)(rng);
}

std::vector<SchedBusy> SchedUtil::watch(double seconds, const std::function<bool()>& stop) {
    take();  // the interval starts now
    std::thread sampler([&] {
        priority_ = raise_wakeup_priority();
        std::mt19937_64 rng(std::random_device{}());
        const uint64_t t0 = monotonic_ns(), end = t0 + static_cast<uint64_t>(seconds * 1e9);
        // A wakeup that came late is one sample, not a burst of those it missed: they would all
        // read the one instant it could run at.
        for (uint64_t next = t0 + next_gap_ns(rng, 1000); next < end && !(stop && stop());
             next = std::max(next + next_gap_ns(rng, 1000), monotonic_ns())) {
            timespec ts{static_cast<time_t>(next / 1'000'000'000ull), static_cast<long>(next % 1'000'000'000ull)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
            sample();
        }
    });
    sampler.join();
    return take();
}

nlohmann::json sched_json(const std::vector<SchedBusy>& s) {
    nlohmann::json out = nlohmann::json::array();
    for (const SchedBusy& b : s)
        out.push_back({{"type", b.type == BB_SCHED_NORMAL      ? "normal"
                                : b.type == BB_SCHED_DIRTY_CPU ? "dirty_cpu"
                                                               : "dirty_io"},
                       {"no", b.no},
                       {"busy", b.busy},
                       {"samples", b.samples}});
    return out;
}

std::string SchedUtil::line(const std::vector<SchedBusy>& s) {
    std::string out;
    for (uint8_t type : {uint8_t{BB_SCHED_NORMAL}, uint8_t{BB_SCHED_DIRTY_CPU}, uint8_t{BB_SCHED_DIRTY_IO}}) {
        std::string part;
        size_t idle = 0, all = 0;
        for (const SchedBusy& b : s) {
            if (b.type != type) continue;
            all++;
            // Dirty schedulers are mostly idle (ten dirty I/O ones by default): those at 0% are
            // one figure, not a column each.
            if (type != BB_SCHED_NORMAL && 100 * b.busy < 0.5) idle++;
            else part += fmt::format("{}{} {:.0f}%", part.empty() ? "" : "  ", b.no, 100 * b.busy);
        }
        if (idle) part += part.empty() ? fmt::format("{} at 0%", idle) : fmt::format(", {} more at 0%", idle);
        if (part.empty()) continue;
        const char* kind = type == BB_SCHED_NORMAL ? "normal" : type == BB_SCHED_DIRTY_CPU ? "dirty cpu" : "dirty io";
        out += fmt::format("{}{} {}", out.empty() ? "" : " | ", kind, part);
    }
    return out;
}

}  // namespace bb
