// libFuzzer target: what the agent reads of every beam.smp on the host (target/discovery.hpp), all
// of it written by processes the agent does not trust, and --match over the result. The input
// is split at "\x01\x01" into a command line, an environment, a cgroup file and a status file
// (NUL-separated as /proc has them); the whole input is then a /proc/PID/stat line. Each
// parsing is run as the agent runs it, then the labels, the pod uid and the matcher (the
// examples of packaging/agent.conf and a pattern that backtracks without end in std::regex);
// the whole input is also the VM's node-name buffer (target/node_name.hpp).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "target/discovery.hpp"
#include "target/node_name.hpp"
#include "agent/matcher.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace bb;
    using namespace bb::agent;
    static const Matcher matcher({"rabbit@", "/kubepods", "bbx@.*", "(a*)*b", "^[^ ]*beam\\.smp .*-sname (x|y)+$"});
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    std::vector<std::string> parts;
    for (size_t at = 0;;) {
        size_t end = in.find("\x01\x01", at);
        parts.emplace_back(in.substr(at, end == std::string_view::npos ? std::string_view::npos : end - at));
        if (end == std::string_view::npos) break;
        at = end + 2;
    }
    parts.resize(std::max<size_t>(parts.size(), 4));
    ProcTexts t;
    t.exe = "/usr/lib/erlang/erts-13.1.5/bin/beam.smp";
    t.stat = "1 (beam.smp) S 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 7";  // field 22, the start time: 7
    t.cmdline = parts[0];
    t.environ = parts[1];
    t.cgroup = parts[2];
    t.status = parts[3];
    auto p = parse_beam(1, t);
    if (!p) __builtin_trap();  // a beam.smp with a start time is one, whatever else it says
    if (p->argv.size() > kMaxCmdline || p->start_time != 7) __builtin_trap();
    const VmLabels l = labels_of(*p);
    if (l.node.size() > 256 || l.release.size() > 256 || l.pod_name.size() > 253 || l.pod_namespace.size() > 63)
        __builtin_trap();
    if (!l.pod_uid.empty() && (l.pod_uid.size() != 36 || l.pod_uid.find('_') != std::string::npos)) __builtin_trap();
    matcher.wanted(*p, l);
    if (joined_cmdline(p->argv).size() > kMatchedCmdline) __builtin_trap();
    // The stat line alone as the whole input: start_time_of's field walk over anything.
    t.stat = std::string(in);
    parse_beam(1, t);
    pod_uid(std::string(in));
    container_id(std::string(in));
    // The whole input as the VM's node-name buffer, and as a --node a user typed.
    if (auto name = parse_node_name(in)) {
        if (name->size() >= kNodeNameBuffer) __builtin_trap();
        for (unsigned char c : *name)
            if (c < 0x20 || c >= 0x7f) __builtin_trap();  // no control byte reaches a label or a terminal
        node_matches(*name, std::string(in));
    }
    return 0;
}
