// beam-bpf-vms: every BEAM VM on this host, containers included, with what names it (node,
// release, OTP release, container): the pid to give the other tools, or the --node name.
#include <fmt/format.h>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "base/error.hpp"
#include "base/usage.hpp"
#include "find/find_vm.hpp"

using namespace bb;

namespace {

std::string uptime_text(double s) {
    auto t = static_cast<uint64_t>(s);
    if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
    if (t < 86400) return fmt::format("{}h{:02}m", t / 3600, t % 3600 / 60);
    return fmt::format("{}d{:02}h", t / 86400, t % 86400 / 3600);
}

int run(int argc, char** argv) {
    CLI::App app{
        "beam-bpf-vms: every BEAM VM (beam.smp) on this host, containers included: its pid as the host\n"
        "sees it, node name, release, OTP release, uptime and container id. Give the pid (or the node\n"
        "name, --node) to beam-bpf-sample, beam-bpf-blame or beam-bpf-procs. Run as root to see them all."};
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return usage_error(app, e);
    }
    const auto vms = list_vms();
    if (vms.empty()) {
        fmt::print(stderr, "{}: no BEAM VM runs on this host{}\n", tool_name(),
                   geteuid() == 0 ? "" : " (as far as this user may see: run as root to see every VM)");
        return 0;
    }
    // The labels are cleaned of control bytes by labels_of (target/discovery.hpp).
    fmt::print("{:<8} {:<28} {:<16} {:>3} {:>8} {}\n", "PID", "NODE", "RELEASE", "OTP", "UPTIME", "CONTAINER");
    bool marked = false;
    for (const auto& v : vms) {
        // The node as node() gives it, read from the VM; a name only its command line gives yet
        // is marked.
        std::string node = v.labels.node.empty() ? "-" : v.labels.node + (v.labels.node_from_command_line ? "*" : "");
        marked |= v.labels.node_from_command_line;
        fmt::print("{:<8} {:<28} {:<16} {:>3} {:>8} {}\n", v.process.pid, node,
                   v.labels.release.empty() ? "-" : v.labels.release,
                   v.otp_release ? std::to_string(v.otp_release) : "?", uptime_text(v.uptime_s),
                   v.labels.container_id.empty() ? "-" : v.labels.container_id.substr(0, 12));
    }
    if (marked)
        fmt::print(
            "* from the command line (-name, -sname): the VM is not distributed yet, or its memory is not "
            "this user's to read\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return guarded_main("beam-bpf-vms", [&] { return run(argc, argv); });
}
