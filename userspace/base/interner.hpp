// One copy of equal values for the whole process, for as long as anyone holds it. The agent
// follows VMs by the dozen, mostly of one release: each reads the same symbols (of beam.smp,
// of every JIT module), and one copy serves them all. Values are compared whole, so only equal
// content is ever shared: a VM cannot make another VM's symbols its own.
#pragma once
#include <cstddef>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace bb {

template <class T>
class Interner {
public:
    // `hash` is the caller's, of what tells values apart cheaply. A target may make many values
    // that hash alike on purpose: at most kCompared are compared, after which its value is
    // kept unshared (a lost saving, never a wrong answer or a long search).
    std::shared_ptr<const T> get(T value, size_t hash) {
        std::lock_guard lock(mutex_);
        auto [lo, hi] = held_.equal_range(hash);
        int compared = 0;
        for (auto it = lo; it != hi && compared < kCompared; ++it) {
            auto one = it->second.lock();
            if (!one) continue;
            if (*one == value) return one;
            compared++;
        }
        auto one = std::make_shared<const T>(std::move(value));
        if (compared < kCompared) held_.emplace(hash, one);
        // Values nobody holds any more are forgotten now and then (once the table has doubled).
        if (held_.size() >= sweep_at_) {
            std::erase_if(held_, [](const auto& kv) { return kv.second.expired(); });
            sweep_at_ = std::max<size_t>(kMinSweep, 2 * held_.size());
        }
        return one;
    }

private:
    static constexpr int kCompared = 8;
    static constexpr size_t kMinSweep = 1024;
    std::mutex mutex_;
    std::unordered_multimap<size_t, std::weak_ptr<const T>> held_;
    size_t sweep_at_ = kMinSweep;
};

}  // namespace bb
