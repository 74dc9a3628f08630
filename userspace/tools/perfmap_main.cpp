// beam-bpf-perfmap: writes /tmp/perf-PID.map for a running BEAM VM from outside, from the JIT's
// debug entries (__jit_debug_descriptor, symbols/jit_code.hpp), so that perf, bcc and every
// other perf-map consumer name Erlang frames without restarting the VM with +JPperf map.
// The VM is only read (process_vm_readv), never stopped or written to.
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/usage.hpp"
#include "symbols/jit_code.hpp"
#include "target/vm.hpp"

using namespace bb;

namespace {

std::atomic<bool> stop_requested{false};
void on_signal(int) { stop_requested = true; }

// One map line's name as the VM's own +JPperf map writes it ("$lists:keyfind/3",
// "$lists:keyfind/3-CodeInfoPrologue", "$lists::codeHeader"). The names come from the target's
// memory: a control byte (a newline would start a forged line) becomes '?'.
std::string map_name(const JitRange& r) {
    std::string s = "$" + r.name + (r.prologue ? "-CodeInfoPrologue" : "");
    for (char& c : s)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
    return s;
}

struct Written {
    size_t ranges = 0, modules = 0;
};

// The whole map into a temp file next to `path`, then renamed over it: a consumer reading the
// map at any instant sees the old one or the new one, never half of one. mkstemp's O_EXCL and
// rename(2) (which replaces a symlink at `path`, never what it points to) keep /tmp safe.
Written write_map(const JitCodeIndex& jit, const std::string& path) {
    std::string text;
    Written w;
    uint64_t last_base = UINT64_MAX;  // live modules never overlap: a new base is a new module
    for (const auto& [base, m, r] : jit.live_ranges()) {
        text += fmt::format("{:#x} {:x} {}\n", base + r->start, r->end - r->start, map_name(*r));
        w.ranges++;
        if (base != last_base) w.modules++, last_base = base;
    }
    std::string tmp = path + ".XXXXXX";
    int fd = mkstemp(tmp.data());
    if (fd < 0) throw UserError(fmt::format("cannot create {}: {}", tmp, strerror(errno)));
    bool ok = fchmod(fd, 0644) == 0;  // perf reads maps it does not own (it refuses other owners' only as non-root)
    for (size_t off = 0; ok && off < text.size();) {
        ssize_t n = write(fd, text.data() + off, text.size() - off);
        if (n < 0 && errno == EINTR) continue;
        ok = n > 0;
        if (ok) off += size_t(n);
    }
    int saved = errno;
    ok = close(fd) == 0 && ok;
    if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
        saved = errno ? errno : saved;
        unlink(tmp.c_str());
        throw UserError(fmt::format("cannot write {}: {}", path, strerror(saved)));
    }
    return w;
}

int run(int argc, char** argv) {
    CLI::App app{
        "beam-bpf-perfmap: writes /tmp/perf-PID.map for a running BEAM VM (OS pid of beam.smp), read from\n"
        "outside from the JIT's debug entries, so that perf, bcc and other perf-map consumers name its\n"
        "Erlang code with no restart and no +JPperf. The same ranges and names as the VM's own\n"
        "+JPperf map. Written whole and renamed into place. --follow keeps it current as modules load\n"
        "and are purged, until Ctrl-C or the VM exits. For a VM in a container give the pid the host\n"
        "sees: the map goes to the host's /tmp, where perf on the host looks."};
    int pid = 0;
    std::string out;
    bool follow = false;
    double interval = 1.0;
    app.add_option("pid", pid, "OS pid of beam.smp")->required();
    app.add_option("-o,--output", out, "where to write (default /tmp/perf-PID.map)");
    app.add_flag("--follow", follow, "rewrite the map whenever the VM's code changes, until Ctrl-C");
    app.add_option("--interval", interval, "with --follow: seconds between checks of the code list")
        ->capture_default_str()
        ->check(CLI::Range(0.01, 3600.0));
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return usage_error(app, e);
    }
    if (out.empty()) out = fmt::format("/tmp/perf-{}.map", pid);

    Vm vm = Vm::attach(pid);
    JitCodeIndex jit(vm.mem(), vm.symbol_address("__jit_debug_descriptor"), !vm.release().jit_unregisters);
    auto refreshed = jit.refresh(monotonic_ns());
    if (!refreshed.ok) throw UserError("cannot read the VM's JIT code list: " + refreshed.error);
    if (!refreshed.error.empty()) fmt::print(stderr, "beam-bpf-perfmap: warning: {}\n", refreshed.error);
    Written w = write_map(jit, out);
    fmt::print(stderr, "beam-bpf-perfmap: wrote {}: {} ranges of {} modules\n", out, w.ranges, w.modules);
    if (!follow) return 0;

    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    uint64_t generation = jit.generation();
    const auto step = std::chrono::duration<double>(interval);
    while (!stop_requested) {
        auto until = std::chrono::steady_clock::now() + step;
        while (!stop_requested && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::min<std::chrono::duration<double>>(step, std::chrono::milliseconds(50)));
        if (stop_requested) break;
        if (!vm.alive()) {
            fmt::print(stderr, "beam-bpf-perfmap: the VM exited; {} is its last map\n", out);
            return 0;
        }
        // A list changing under the walk is retried at the next interval.
        auto r = jit.refresh(monotonic_ns());
        if (!r.ok || jit.generation() == generation) continue;
        generation = jit.generation();
        w = write_map(jit, out);
        fmt::print(stderr, "beam-bpf-perfmap: updated {}: {} ranges of {} modules (+{} -{})\n", out, w.ranges,
                   w.modules, r.added, r.retired);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return guarded_main("beam-bpf-perfmap", [&] { return run(argc, argv); });
}
