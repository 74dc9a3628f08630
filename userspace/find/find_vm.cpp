#include "find/find_vm.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "base/closest.hpp"
#include "base/error.hpp"
#include "target/node_name.hpp"
#include "target/release.hpp"

namespace bb {

namespace {

// What any user may read of a process: /proc/PID/stat's name (between the first '(' and the
// last ')': it may hold either) and parent, /proc/PID/status's Tgid.
struct ProcBrief {
    bool exists = false;
    std::string comm;
    pid_t ppid = 0, tgid = 0;
};
ProcBrief brief(pid_t pid) {
    ProcBrief b;
    const std::string stat = read_bounded(fmt::format("/proc/{}/stat", pid), 4096);
    size_t open = stat.find('('), close = stat.rfind(')');
    if (open == std::string::npos || close == std::string::npos || close < open || close + 4 >= stat.size()) return b;
    b.exists = true;
    b.comm = clean(stat.substr(open + 1, close - open - 1), 64);
    const char* at = stat.data() + close + 4;  // ") S PPID"
    std::from_chars(at, stat.data() + stat.size(), b.ppid);
    const std::string status = read_bounded(fmt::format("/proc/{}/status", pid), 4096);
    if (size_t t = status.find("\nTgid:"); t != std::string::npos) {
        size_t v = status.find_first_not_of(" \t", t + 6);
        if (v != std::string::npos) std::from_chars(status.data() + v, status.data() + status.size(), b.tgid);
    }
    if (b.tgid == 0) b.tgid = pid;
    return b;
}

// Whether `pid` runs a BEAM emulator: its executable when that can be read, else its name
// (what an unprivileged user sees: the executable's link is not for them to read).
enum class Beam { yes, no, gone };
Beam is_beam(pid_t pid, const std::string& comm) {
    char link[4096];
    ssize_t n = readlink(fmt::format("/proc/{}/exe", pid).c_str(), link, sizeof link);
    if (n > 0) return is_beam_exe(std::string(link, static_cast<size_t>(n))) ? Beam::yes : Beam::no;
    if (errno == ENOENT) return Beam::gone;  // exited, or a kernel thread
    return comm.starts_with("beam") ? Beam::yes : Beam::no;
}

std::vector<pid_t> all_pids() {
    std::vector<pid_t> out;
    std::unique_ptr<DIR, int (*)(DIR*)> d(opendir("/proc"), closedir);
    if (!d) return out;
    while (dirent* e = readdir(d.get())) {
        pid_t pid = 0;
        auto [end, ec] = std::from_chars(e->d_name, e->d_name + strlen(e->d_name), pid);
        if (ec == std::errc() && !*end && pid > 0) out.push_back(pid);
    }
    return out;
}

// The BEAMs among the descendants of `root` (its children, theirs, ...): what a wrapper script
// (erl run by sh, elixir, ejabberdctl, rabbitmq-server) started.
std::vector<pid_t> beams_under(pid_t root) {
    std::multimap<pid_t, pid_t> children;
    std::map<pid_t, std::string> comm;
    for (pid_t p : all_pids()) {
        ProcBrief b = brief(p);
        if (!b.exists) continue;
        children.emplace(b.ppid, p);
        comm[p] = b.comm;
    }
    std::vector<pid_t> out, todo{root};
    // A parent link can only point to an older process, so this ends; the bound is for a /proc
    // that changes under the walk.
    for (size_t steps = 0; !todo.empty() && steps < 1'000'000; steps++) {
        pid_t p = todo.back();
        todo.pop_back();
        for (auto [it, end] = children.equal_range(p); it != end; ++it) {
            // A BEAM's own children (erl_child_setup, ports) are not other VMs.
            if (is_beam(it->second, comm[it->second]) == Beam::yes) out.push_back(it->second);
            else todo.push_back(it->second);
        }
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::string node_of(pid_t pid) {
    auto p = read_beam("/proc", pid);
    return p ? labels_of(*p).node : "";
}

// "beam.smp pid 130 (node a@host)" for messages.
std::string vm_text(pid_t pid) {
    std::string node = node_of(pid);
    return fmt::format("beam.smp pid {}{}", pid, node.empty() ? "" : " (node " + node + ")");
}

// What a pid is, for the message refusing several: "beam.smp, node a@host", "sleep".
std::string what_is(pid_t pid) {
    ProcBrief b = brief(pid);
    if (!b.exists) return "no such process";
    if (b.tgid != pid) return fmt::format("a thread of pid {}", b.tgid);
    std::string node = is_beam(pid, b.comm) == Beam::yes ? node_of(pid) : "";
    return node.empty() ? b.comm : b.comm + ", node " + node;
}

std::optional<pid_t> parse_pid(const std::string& text) {
    pid_t pid = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), pid);
    if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
    return pid;
}

pid_t by_node(const std::string& name) {
    std::vector<std::pair<pid_t, std::string>> all, match;
    for (const auto& p : find_beams()) {
        std::string node = labels_of(p).node;
        all.emplace_back(p.pid, node);
        if (node_matches(node, name)) match.emplace_back(p.pid, node);
    }
    auto list = [](const auto& vms) {
        std::vector<std::string> items;
        for (const auto& [pid, node] : vms) items.push_back(fmt::format("{} (pid {})", node.empty() ? "-" : node, pid));
        return join(items);
    };
    if (match.size() == 1) return match.front().first;
    if (match.size() > 1)
        throw UserError(fmt::format("--node {}: {} VMs have that name: {}; give the full name or a PID", clean(name),
                                    match.size(), list(match)));
    if (all.empty())
        throw UserError(fmt::format("--node {}: no BEAM VM runs on this host (none this user may see)", clean(name)));
    std::vector<std::string> nodes;
    for (const auto& [pid, node] : all) nodes.push_back(node);
    auto near = closest(name, nodes, 1);
    throw UserError(fmt::format("--node {}: no VM has that node name; the VMs: {}{}", clean(name), list(all),
                                !near.empty() && !near[0].empty() && edit_distance(name, near[0]) <= 3
                                    ? "; did you mean " + near[0] + "?"
                                    : ""));
}

}  // namespace

pid_t find_vm(const std::vector<std::string>& targets, const std::string& node) {
    if (!node.empty()) {
        if (!targets.empty()) throw UserError("a PID and --node: give one of them");
        return by_node(node);
    }
    if (targets.empty())
        throw UserError("which VM? give the OS pid of beam.smp, or --node NAME (beam-bpf-vms lists the VMs here)");
    if (targets.size() > 1) {
        std::vector<std::string> given, what;
        for (const auto& t : targets) {
            given.push_back(clean(t, 32));
            auto p = parse_pid(t);
            what.push_back(fmt::format("{} is {}", clean(t, 32), p ? what_is(*p) : "not a pid"));
        }
        throw UserError(
            fmt::format("several pids given ({}): profile one VM at a time; {}", join(given), join(what, "; ")));
    }
    const std::string& text = targets.front();
    auto parsed = parse_pid(text);
    if (!parsed) {
        if (text.find('@') != std::string::npos)
            throw UserError(fmt::format("{}: not a pid; for a node name: --node {}", clean(text), clean(text)));
        throw UserError(
            fmt::format("{}: not a pid (the OS pid of beam.smp; beam-bpf-vms lists the VMs here)", clean(text)));
    }
    pid_t pid = *parsed;
    ProcBrief b = brief(pid);
    if (pid <= 0 || !b.exists) return pid;  // attach says it: invalid, or no such process
    if (b.tgid != pid) {
        // top -H and perf show thread ids: a scheduler thread's is not the VM's pid.
        ProcBrief owner = brief(b.tgid);
        fmt::print(stderr, "{}: pid {} is thread {} of process {} ({}); profiling process {}\n", tool_name(), pid,
                   b.comm, b.tgid, owner.comm, b.tgid);
        pid = b.tgid;
        b = owner;
    }
    Beam beam = is_beam(pid, b.comm);
    if (beam != Beam::no) return pid;
    // Init's descendants are every process: not a wrapper of one VM.
    const auto vms = pid == 1 ? std::vector<pid_t>{} : beams_under(pid);
    if (vms.size() == 1) {
        fmt::print(stderr, "{}: pid {} is {}; profiling its VM, {}\n", tool_name(), pid, b.comm, vm_text(vms[0]));
        return vms[0];
    }
    if (vms.size() > 1) {
        std::vector<std::string> items;
        for (pid_t v : vms) items.push_back(vm_text(v));
        throw UserError(fmt::format("pid {} ({}) started {} VMs: {}; give one of their pids", pid, b.comm, vms.size(),
                                    join(items)));
    }
    throw UserError(fmt::format("process {} ({}) is not a BEAM VM{}; beam-bpf-vms lists the VMs on this host", pid,
                                b.comm, pid == 1 ? " (it is the init process)" : ", nor started one"));
}

std::vector<VmListing> list_vms() {
    std::vector<VmListing> out;
    const double now = std::strtod(read_bounded("/proc/uptime", 64).c_str(), nullptr);
    const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
    for (auto& p : find_beams()) {
        VmListing v;
        v.labels = labels_of(p);
        // The binary it runs (its inode, whatever its mount namespace calls it): the version
        // string is in it.
        if (auto build = read_vm_build_file(fmt::format("/proc/{}/exe", p.pid))) v.otp_release = build->otp_release;
        v.uptime_s = hz > 0 && now > 0 ? std::max(0.0, now - static_cast<double>(p.start_time) / hz) : 0;
        v.process = std::move(p);
        out.push_back(std::move(v));
    }
    return out;
}

}  // namespace bb
