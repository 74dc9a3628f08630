#include "run/run_loop.hpp"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <vector>

#include "base/clock.hpp"

namespace bb {

namespace {
std::atomic<bool> g_stop{false};
const uint64_t g_launch_ns = monotonic_ns();  // static init: as close to exec as we get
void on_signal(int) { g_stop = true; }
}  // namespace

RunStats run_loop(Session& s, const CommonOptions& o,
                  const std::function<void(const bb_record&, std::span<const uint32_t>)>& on_stack,
                  const std::function<bool()>& done, const std::function<void(uint64_t)>& tick) {
    struct sigaction sa{};
    sa.sa_handler = on_signal;  // no SA_RESTART: Ctrl-C must end the wait at once
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);

    const Vm& vm = s.vm;
    Sampler& sampler = *s.sampler;
    Symbolizer& sym = s.sym;
    RunStats st;
    std::vector<uint32_t> frames;
    uint64_t start = monotonic_ns(), last_vm_check = start;
    auto handle = [&](const bb_record& r) {
        if (r.where == BB_WHERE_CODE_EVENT) return sym.code_event(r);
        if (st.records == 0) st.first_record_s = (monotonic_ns() - g_launch_ns) / 1e9;
        st.count(r);
        sym.frames(r, frames);
        on_stack(r, frames);
    };
    for (bool stop = false;;) {
        stop = stop || g_stop || (done && done());
        uint64_t now = monotonic_ns();
        if (o.duration > 0 && now - start >= uint64_t(o.duration * 1e9)) stop = true;
        // After attach nothing may lose the profile collected so far: an error ends the run
        // and is reported with what was collected.
        try {
            if (now - last_vm_check > 1000000000ull) {
                last_vm_check = now;
                if (!vm.alive()) {
                    st.vm_exited = true;
                    stop = true;
                } else {
                    sampler.refresh_vm_state();
                    // A lost code event leaves the index behind: back to walking the list.
                    if (sampler.counters().code_events_lost) sym.follow_code_events(false, now);
                }
            }
            // Code loaded or purged since the last drain must be known before its samples are
            // symbolized; records still in the ring were all taken before `now`.
            sym.refresh(now);
            if (stop) sampler.stop_events();  // then the last drain reads every record emitted
            else if (tick) tick(now);
            sampler.poll(stop ? std::chrono::milliseconds(0) : std::chrono::milliseconds(100), handle);
        } catch (const std::exception& e) {
            if (!stop) {
                st.error = e.what();
                stop = true;
                continue;  // still stop the events and drain what is in the ring
            }
            if (st.error.empty()) st.error = e.what();
        }
        if (stop) break;
    }
    st.interrupted = g_stop;
    st.seconds = (monotonic_ns() - start) / 1e9;
    return st;
}

int end_run(Session& s, const CommonOptions& o, const RunStats& st, const char* what) {
    const SamplerCounters c = s.sampler->counters();
    print_summary(st, c, s.sym, what);
    write_stats(o, st, c, s.sym, [&](uint64_t pid) { return s.vm.format_pid(pid); });
    return st.error.empty() ? 0 : 1;
}

}  // namespace bb
