// beam-bpf-procs --binaries: the node's off-heap binaries, biggest first, each with every process
// that references it; and the processes by the bytes they reference. The "who holds a ref"
// answer to a binary leak, read from outside: no process is made to collect, nothing is written.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/clock.hpp"
#include "base/text.hpp"
#include "inspect/procs_report.hpp"

namespace bb {

namespace {

// Holders of one binary named in the text (every one in JSON).
constexpr size_t kNamedHolders = 4;

struct Binary {
    uint64_t address = 0, bytes = 0;
    uint64_t refc = 0;  // the largest reading: the count may change between two holders' reads
    // Its holders (pid terms, in table order) and the references each holds: one per ProcBin or
    // BinRef, so a process that kept two handles to it holds two.
    std::vector<std::pair<uint64_t, uint64_t>> holders;
    uint64_t found() const {
        uint64_t n = 0;
        for (auto& [pid, refs] : holders) n += refs;
        return n;
    }
    // References the processes' lists do not account for: ETS tables, ports, the VM's own.
    uint64_t elsewhere() const { return refc > found() ? refc - found() : 0; }
};

}  // namespace

int procs_binaries(ProcsContext& c, const ProcsOptions& o) {
    const uint64_t t0 = monotonic_ns();
    std::unordered_map<uint64_t, Binary> binaries;
    TableReads reads{.binaries = &c.vm.release().terms, .each_binary = [&](const ProcessEntry& e, const BinaryHold& h) {
                         Binary& b = binaries[h.binary];
                         b.address = h.binary, b.bytes = h.bytes, b.refc = std::max(b.refc, h.refc);
                         if (b.holders.empty() || b.holders.back().first != e.pid) b.holders.push_back({e.pid, 0});
                         b.holders.back().second++;
                     }};
    const ProcessTable table = read_checked_table(c.vm, reads);
    const double read_ms = (monotonic_ns() - t0) / 1e6;

    std::vector<const Binary*> order;
    uint64_t total = 0, elsewhere_count = 0, elsewhere_bytes = 0;
    for (const auto& [addr, b] : binaries) {
        order.push_back(&b);
        total += b.bytes;
        if (b.elsewhere()) elsewhere_count++, elsewhere_bytes += b.bytes;
    }
    std::ranges::sort(order, [](auto* a, auto* b) {
        return std::pair(a->bytes, a->address) > std::pair(b->bytes, b->address);
    });
    std::vector<const ProcessEntry*> holders;
    for (const ProcessEntry& e : table.processes)
        if (e.binary_count) holders.push_back(&e);
    // The bytes of the distinct binaries each holder references: a process that kept 31 handles
    // to one binary references its bytes 31 times as process_info counts, once here.
    std::unordered_map<uint64_t, uint64_t> distinct;
    for (const auto& [addr, b] : binaries)
        for (auto& [pid, refs] : b.holders) distinct[pid] += b.bytes;
    std::ranges::stable_sort(holders, [](auto* a, auto* b) { return a->binary_bytes > b->binary_bytes; });
    const size_t shown = o.all ? order.size() : std::min(order.size(), o.top);
    const size_t holders_shown = o.all ? holders.size() : std::min(holders.size(), o.top);
    // Names are the target's text: printable from here on.
    std::unordered_map<uint64_t, std::string> names;
    for (const ProcessEntry& e : table.processes)
        names[e.pid] = printable(c.names.name(e.pid, e.c_p, e.reg_name, e.initial));
    auto holder_text = [&](uint64_t pid) {
        const std::string& name = names[pid];
        return c.vm.format_pid(pid) + (name.empty() ? "" : " " + name);
    };

    if (o.json) {
        nlohmann::json j{{"vm_pid", c.vm.pid()},
                         {"otp_release", c.vm.release().major},
                         {"processes_total", table.processes.size()},
                         {"unreadable", table.unreadable},
                         {"partial", table.partial},
                         {"read_ms", read_ms},
                         {"binaries_total", binaries.size()},
                         {"bytes_total", total},
                         {"binaries", nlohmann::json::array()},
                         {"holders", nlohmann::json::array()}};
        for (size_t i = 0; i < shown; i++) {
            const Binary& b = *order[i];
            nlohmann::json held = nlohmann::json::array();
            for (auto& [pid, refs] : b.holders)
                held.push_back({{"pid", c.vm.format_pid(pid)}, {"name", names[pid]}, {"references", refs}});
            j["binaries"].push_back({{"address", b.address},
                                     {"bytes", b.bytes},
                                     {"refc", b.refc},
                                     {"references_found", b.found()},
                                     {"references_elsewhere", b.elsewhere()},
                                     {"holders", held}});
        }
        for (size_t i = 0; i < holders_shown; i++) {
            const ProcessEntry& e = *holders[i];
            j["holders"].push_back({{"pid", c.vm.format_pid(e.pid)},
                                    {"name", names[e.pid]},
                                    {"binary_bytes", e.binary_bytes},
                                    {"binary_count", e.binary_count},
                                    {"distinct_bytes", distinct[e.pid]}});
        }
        std::cout << json_text(j, 1) << "\n";
        return 0;
    }
    fmt::print("{}\n", wrap_words(fmt::format("beam-bpf-procs: {} off-heap binaries, {} in all, referenced by {} of {} "
                                              "processes of {} {}; read in {:.1f} ms",
                                              binaries.size(), human_bytes(total), holders.size(),
                                              table.processes.size(), printable(c.vm.exe_name()), c.vm.pid(), read_ms),
                                  o.columns));
    if (table.partial)
        fmt::print("beam-bpf-procs: {} processes changed while read: their lists may be incomplete\n", table.partial);
    fmt::print("{:<18} {:>10} {:>6} {:>9}  {}\n", "BINARY", "BYTES", "REFC", "ELSEWHERE", "HELD BY");
    for (size_t i = 0; i < shown; i++) {
        const Binary& b = *order[i];
        std::string held;
        for (size_t k = 0; k < b.holders.size() && k < kNamedHolders; k++) {
            held += (k ? ", " : "") + holder_text(b.holders[k].first);
            if (b.holders[k].second > 1) held += fmt::format(" (x{})", b.holders[k].second);
        }
        if (b.holders.size() > kNamedHolders) held += fmt::format(" and {} more", b.holders.size() - kNamedHolders);
        fmt::print("{:<18} {:>10} {:>6} {:>9}  {}\n", fmt::format("{:#x}", b.address), human_bytes(b.bytes), b.refc,
                   b.elsewhere(), held);
    }
    if (shown < order.size()) fmt::print("({} smaller binaries not shown: --all, or -t N)\n", order.size() - shown);
    if (elsewhere_count)
        fmt::print("{} {} ({}) {} also referenced outside the processes (ELSEWHERE: ETS tables, ports, the VM)\n",
                   elsewhere_count, elsewhere_count == 1 ? "binary" : "binaries", human_bytes(elsewhere_bytes),
                   elsewhere_count == 1 ? "is" : "are");
    fmt::print("\n{:<14} {:>10} {:>8} {:>10}  {}\n", "HOLDER", "BINARY", "COUNT", "DISTINCT", "NAME");
    for (size_t i = 0; i < holders_shown; i++) {
        const ProcessEntry& e = *holders[i];
        fmt::print("{:<14} {:>10} {:>8} {:>10}  {}\n", c.vm.format_pid(e.pid), human_bytes(e.binary_bytes),
                   e.binary_count, human_bytes(distinct[e.pid]), names[e.pid]);
    }
    return 0;
}

}  // namespace bb
