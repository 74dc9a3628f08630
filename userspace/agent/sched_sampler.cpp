#include "agent/sched_sampler.hpp"

#include <time.h>

#include <algorithm>
#include <random>
#include <vector>

#include "base/clock.hpp"

namespace bb::agent {

SchedSampler::SchedSampler() : thread_([this] { run(); }) {}

SchedSampler::~SchedSampler() {
    stop_ = true;
    thread_.join();
}

void SchedSampler::add(pid_t pid, std::shared_ptr<SchedUtil> util) {
    std::lock_guard g(mu_);
    vms_[pid] = std::move(util);
}

void SchedSampler::remove(pid_t pid) {
    std::lock_guard g(mu_);
    vms_.erase(pid);
}

void SchedSampler::run() {
    priority_ = raise_wakeup_priority();
    std::mt19937_64 rng(std::random_device{}());
    uint64_t next = monotonic_ns();
    std::vector<std::shared_ptr<SchedUtil>> now;
    while (!stop_) {
        next = std::max(next + SchedUtil::next_gap_ns(rng, kSampleHz), monotonic_ns());
        timespec ts{static_cast<time_t>(next / 1'000'000'000ull), static_cast<long>(next % 1'000'000'000ull)};
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr);
        // Sampled outside the lock: attaching a VM never waits for the reads of the others.
        {
            std::lock_guard g(mu_);
            now.clear();
            for (const auto& [pid, u] : vms_) now.push_back(u);
        }
        for (const auto& u : now) u->sample();
    }
}

}  // namespace bb::agent
