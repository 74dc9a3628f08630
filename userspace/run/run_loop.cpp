#include "run/run_loop.hpp"

#include <signal.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include <fmt/format.h>

#include "base/clock.hpp"

namespace bb {

namespace {
std::atomic<bool> g_stop{false};
const uint64_t g_launch_ns = monotonic_ns();  // static init: as close to exec as we get
void on_signal(int) { g_stop = true; }

// The CPU time (user + system) of every thread of `pid`, from /proc/PID/stat; -1 if unreadable.
// It tells an idle VM (no samples: none were due) from events that never fired.
double cpu_seconds(pid_t pid) {
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    const char* close_paren = strrchr(buf, ')');  // the name before it may hold anything
    unsigned long long utime = 0, stime = 0;
    if (!close_paren ||
        sscanf(close_paren + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2)
        return -1;
    return double(utime + stime) / double(sysconf(_SC_CLK_TCK));
}

// A run with (almost) no samples says why, when the counters tell: an idle VM, events that
// never fired, or a --process that never ran. Otherwise an empty report is a riddle.
void explain_few(const CommonOptions& o, const RunStats& st, const SamplerCounters& c, const char* what) {
    constexpr uint64_t kFew = 10;
    if (st.records >= kFew || !st.error.empty() || st.vm_exited || is_alloc(o.event)) return;
    const char* tool = tool_name();
    const double ms = st.vm_cpu_s * 1e3;
    const uint64_t seen = c.bpf[BB_C_SEEN], filtered = c.bpf[BB_C_FILTERED];
    if (st.records == 0 && seen > 0 && filtered > 0 && !o.process.empty()) {
        fmt::print(stderr, "{}: 0 {}: --process {} did not run during the {:.1f} s ({} samples of other processes)\n",
                   tool, what, o.process, st.seconds, filtered);
    } else if (seen == 0 && st.vm_cpu_s >= 0.05 && c.perf_events) {
        fmt::print(stderr,
                   "{}: {} {}, though the VM used {:.0f} ms of CPU in {:.1f} s: no sampling event fired ({} open; "
                   "see --stats)\n",
                   tool, st.records, what, ms, st.seconds, c.events);
    } else if (st.vm_cpu_s >= 0 && st.vm_cpu_s < 0.05) {
        fmt::print(stderr, "{}: {} {}: the VM's schedulers were idle for the whole {:.1f} s ({:.0f} ms of CPU)\n", tool,
                   st.records, what, st.seconds, ms);
    }
}
}  // namespace

void catch_stop_signals() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;  // no SA_RESTART: Ctrl-C must end the wait at once
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() { return g_stop; }

RunStats run_loop(Session& s, const CommonOptions& o,
                  const std::function<void(const bb_record&, std::span<const uint32_t>)>& on_stack,
                  const std::function<bool()>& done, const std::function<void(uint64_t)>& tick) {
    catch_stop_signals();
    const Vm& vm = s.vm;
    Sampler& sampler = *s.sampler;
    Symbolizer& sym = s.sym;
    RunStats st;
    std::vector<uint32_t> frames;
    uint64_t start = monotonic_ns(), last_vm_check = start;
    const double cpu_start = cpu_seconds(vm.pid());
    auto handle = [&](const bb_record& r) {
        if (r.where == BB_WHERE_CODE_EVENT) return sym.code_event(r);
        if (st.records == 0) st.first_record_s = (monotonic_ns() - g_launch_ns) / 1e9;
        st.count(r);
        sym.frames(r, frames);
        on_stack(r, frames);
    };
    s.names.learn_dictionary_keys();
    sampler.set_dictionary_keys(s.names.dictionary_keys().initial_call, s.names.dictionary_keys().callers);
    s.attach_times.mark("dictionary keys");
    st.attach_ms = s.attach_times.ms();
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
                    if (sampler.counters().bpf[BB_C_CODE_EVENTS_LOST]) sym.follow_code_events(false, now);
                }
            }
            // Code loaded or purged since the last drain must be known before its samples are
            // symbolized; records still in the ring were all taken before `now`.
            sym.refresh(now);
            if (stop) sampler.stop_events();  // then the last drain reads every record emitted
            else if (tick) tick(now);
            sampler.poll(stop ? std::chrono::milliseconds(0) : std::chrono::milliseconds(100), handle);
            // Dictionary keys met in that drain's names go to the walker at once: a short-lived
            // task sampled before they do is named by its VM initial call alone.
            const auto& keys = s.names.dictionary_keys();
            sampler.set_dictionary_keys(keys.initial_call, keys.callers);
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
    if (double cpu_end = cpu_seconds(vm.pid()); cpu_start >= 0 && cpu_end >= cpu_start)
        st.vm_cpu_s = cpu_end - cpu_start;
    st.seconds = (monotonic_ns() - start) / 1e9;
    return st;
}

int end_run(Session& s, const CommonOptions& o, const RunStats& st, const char* what) {
    const SamplerCounters c = s.sampler->counters();
    print_summary(st, c, s.sym, what);
    explain_few(o, st, c, what);
    write_stats(o, st, c, s.sym, [&](uint64_t pid) { return s.vm.format_pid(pid); });
    return st.error.empty() ? 0 : 1;
}

}  // namespace bb
