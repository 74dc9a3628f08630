// The agent's scheduler utilization: one thread samples the busy state of every followed VM's
// normal schedulers (inspect/sched_util.hpp) at jittered instants, while the agent's loop takes
// each VM's shares when it ends the VM's interval. 100 samples a second: 1,000 in the default
// 10 s interval, 4.7 points at 3 sd at 50% busy, at 1 to 2 us a read per scheduler.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "inspect/sched_util.hpp"

namespace bb::agent {

class SchedSampler {
public:
    static constexpr int kSampleHz = 100;
    SchedSampler();
    ~SchedSampler();
    SchedSampler(const SchedSampler&) = delete;
    SchedSampler& operator=(const SchedSampler&) = delete;

    void add(pid_t pid, std::shared_ptr<SchedUtil> util);
    void remove(pid_t pid);
    // What the sampling thread got (base/realtime.hpp); realtime until it has started.
    WakeupPriority priority() const { return priority_; }

private:
    void run();
    std::mutex mu_;
    std::map<pid_t, std::shared_ptr<SchedUtil>> vms_;
    std::atomic<bool> stop_{false};
    std::atomic<WakeupPriority> priority_{WakeupPriority::realtime};
    std::thread thread_;
};

}  // namespace bb::agent
