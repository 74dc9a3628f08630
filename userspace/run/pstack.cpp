#include "run/pstack.hpp"

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "base/text.hpp"
#include "run/run_loop.hpp"

namespace bb {

namespace {

struct SchedKey {
    uint8_t type;
    uint16_t no;
    auto operator<=>(const SchedKey&) const = default;
};

}  // namespace

int run_pstack(Session& s, const CommonOptions& o, const std::vector<SchedThread>& scheds) {
    // One stack of each running scheduler. A sample in JIT code is preferred: in C code
    // the leaf Erlang function is missing when it runs in a loop without a stack frame.
    size_t normal = 0;
    for (const auto& t : scheds) normal += t.sched.type == BB_SCHED_NORMAL;
    std::map<SchedKey, std::pair<bb_record, std::vector<uint32_t>>> seen;
    std::set<SchedKey> moved;   // their sampled process was seen later on another scheduler
    auto normal_in_jit = [&] {  // normal schedulers with a sample in JIT code
        size_t n = 0;
        for (const auto& [k, v] : seen) n += k.type == BB_SCHED_NORMAL && v.first.where == BB_WHERE_JIT;
        return n;
    };
    CommonOptions po = o;
    po.duration = o.duration > 0 ? o.duration : 2.0;  // idle schedulers are never sampled
    auto st = run_loop(
        s, po,
        [&](const bb_record& r, std::span<const uint32_t> frames) {
            if (!(r.flags & BB_F_PROC) || r.sched_type == BB_SCHED_NONE) return;
            SchedKey k{r.sched_type, r.sched_no};
            auto it = seen.find(k);
            bool jit = r.where == BB_WHERE_JIT;
            if (it != seen.end() && (it->second.first.where == BB_WHERE_JIT || !jit)) return;
            // The samples are taken at different instants: a process that moved (to a dirty
            // scheduler for a GC, say, and back) is shown only where it was seen last.
            for (auto other = seen.begin(); other != seen.end();) {
                if (other->first == k || other->second.first.erl_pid != r.erl_pid) {
                    ++other;
                    continue;
                }
                if (other->second.first.time_ns > r.time_ns) return;
                moved.insert(other->first);
                other = seen.erase(other);
            }
            // The ring record ends after its frames: copy the header only (its frames are in
            // `frames`).
            bb_record head;
            std::memcpy(&head, &r, bb_record_size(0));
            head.nframes = 0;
            seen.insert_or_assign(k, std::make_pair(head, std::vector<uint32_t>(frames.begin(), frames.end())));
            moved.erase(k);
        },
        [&] { return normal && normal_in_jit() == normal; });
    auto& os = s.out.stream(Format::top);
    for (const auto& t : scheds) {
        SchedKey k{t.sched.type, t.sched.no};
        auto it = seen.find(k);
        if (it == seen.end()) {
            if (moved.count(k))
                fmt::print(os,
                           "{} (tid {}): unknown (its process moved to another scheduler during the "
                           "snapshot)\n\n",
                           sched_name(t.sched.type, t.sched.no), t.tid);
            else if (t.sched.type == BB_SCHED_NORMAL)
                fmt::print(os, "{} (tid {}): idle\n\n", sched_name(t.sched.type, t.sched.no), t.tid);
            continue;
        }
        const auto& [r, frames] = it->second;
        const std::string& name = s.names.name(r);
        fmt::print(os, "{} (tid {}): {}{}{}\n", sched_name(r.sched_type, r.sched_no), r.tid, s.vm.format_pid(r.erl_pid),
                   name.empty() ? "" : " ", printable(name));
        // Leaf first. A run of one function (deep recursion) is one line "NAME xN": 512
        // equal lines would push everything else out of sight.
        std::vector<std::string> labels;
        for (auto f = frames.rbegin(); f != frames.rend(); ++f)
            labels.push_back(printable(s.sym.frames().label(*f, o.lines)));
        for (auto l = labels.begin(); l != labels.end();) {
            auto run = std::find_if(l, labels.end(), [&](const std::string& m) { return m != *l; });
            if (run - l > 1) fmt::print(os, "    {} x{}\n", *l, run - l);
            else fmt::print(os, "    {}\n", *l);
            l = run;
        }
        fmt::print(os, "\n");
    }
    s.out.commit();
    return end_run(s, o, st, "samples");
}

}  // namespace bb
