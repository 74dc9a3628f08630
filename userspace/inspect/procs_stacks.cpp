// beam-bpf-procs --stacks: every process's stack (inspect/process_stack.hpp), processes with the
// same state and frames grouped (inspect/stack_groups.hpp), the biggest group first.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/clock.hpp"
#include "base/text.hpp"
#include "inspect/process_stack.hpp"
#include "inspect/procs_report.hpp"
#include "inspect/stack_groups.hpp"
#include "profile/frames.hpp"

namespace bb {

namespace {

// Words of stack read in one run at most, over every process (256 MiB): a VM of a million
// processes whose stacks are all deep costs a bounded time. Past it, processes are listed with
// their state and the function they are in, under a frame that says so.
constexpr uint64_t kRunWords = uint64_t{1} << 25;
// Processes of a group named in the text (every group's first ones in JSON).
constexpr size_t kNamed = 3;

// Frame names, each once: a stack is a vector of ids.
class FrameNames {
public:
    uint32_t id(const std::string& name) {
        auto [it, added] = ids_.try_emplace(name, static_cast<uint32_t>(names_.size()));
        if (added) names_.push_back(name);
        return it->second;
    }
    const std::string& name(uint32_t id) const { return names_[id]; }

private:
    std::unordered_map<std::string, uint32_t> ids_;
    std::vector<std::string> names_;
};

}  // namespace

int procs_stacks(ProcsContext& c, const ProcsOptions& o) {
    const uint64_t t0 = monotonic_ns();
    const ProcessTable table = read_checked_table(c.vm);
    const StackReads reads = stack_reads(c.vm.mem(), c.vm.offsets());

    FrameNames names;
    // The frame of the function whose code holds `addr`, named by the JIT (as the rest of the
    // tool names it, printable); -1 when no function it knows does. Looked up once per address.
    std::unordered_map<uint64_t, int64_t> code_frames;
    auto code_frame = [&](uint64_t addr) {
        auto [it, added] = code_frames.try_emplace(addr, -1);
        if (added)
            if (std::optional<std::string> name = c.jit_name(addr))
                it->second = names.id(printable(c.raw_names ? *name : display_name(*name)));
        return it->second;
    };
    const CodeView code{.in_code = [&](uint64_t addr) { return code_frame(addr) >= 0; }, .normal_exit = c.normal_exit};

    // The function a process resumes in: its resume address's, else the one the VM last noted.
    auto resumes_in = [&](const ProcessEntry& p) {
        if (int64_t id = code_frame(p.i); id >= 0) return static_cast<uint32_t>(id);
        std::string f = printable(c.function(p.current, 0));
        return names.id(f.empty() ? "[unknown function]" : f);
    };
    // A process not walked: the function the VM noted (as the table shows it), else its resume
    // address's.
    auto noted = [&](const ProcessEntry& p) {
        std::string f = printable(c.function(p.current, p.i));
        return names.id(f.empty() ? "[unknown function]" : f);
    };
    const uint32_t truncated = names.id(fmt::format("[truncated: stack deeper than {} words]", kStackWordsPerProcess));
    const uint32_t not_read = names.id(fmt::format("[stack not read: this run's {} words were read]", kRunWords));

    struct Counts {
        size_t read = 0, busy = 0, changed = 0, gone = 0, unreadable = 0, not_read = 0, truncated = 0, retried = 0;
        uint64_t words = 0, stray = 0;
    } n;
    std::vector<StackKey> keys;
    std::vector<const ProcessEntry*> procs;  // the process of each key (its table entry: names)
    for (const ProcessEntry& e : table.processes) {
        StackKey key;
        if (n.words >= kRunWords) {
            n.not_read++;
            key.state = e.status();
            key.frames = {noted(e), not_read};
        } else {
            ProcessStack s = read_process_stack(reads, e, code, std::min(kStackWordsPerProcess, kRunWords - n.words));
            n.words += s.words_copied;
            n.retried += s.attempts > 1;
            switch (s.outcome) {
            case ProcessStack::Outcome::read:
                n.read++;
                n.stray += s.scan.stray;
                key.state = s.proc.status();
                // No frame and resuming in the JIT's trampoline: hibernated, or not yet run.
                key.frames.push_back(s.scan.cps.empty() && names.name(resumes_in(s.proc)) == kRunProcess
                                         ? names.id(run_process_frame(s.proc))
                                         : resumes_in(s.proc));
                for (uint64_t cp : s.scan.cps) key.frames.push_back(static_cast<uint32_t>(code_frame(cp - 1)));
                if (s.words_unread) {
                    n.truncated++;
                    key.frames.push_back(truncated);
                }
                break;
            case ProcessStack::Outcome::busy:
                n.busy++;
                key.state = s.proc.status();
                key.frames = {noted(s.proc)};
                break;
            case ProcessStack::Outcome::changed: n.changed++; continue;
            case ProcessStack::Outcome::gone: n.gone++; continue;
            case ProcessStack::Outcome::unreadable: n.unreadable++; continue;
            }
        }
        keys.push_back(std::move(key));
        procs.push_back(&e);
    }
    const uint64_t read_ns = monotonic_ns() - t0;
    const std::vector<StackGroup> groups = group_stacks(keys, kNamed);
    const size_t shown = o.all ? groups.size() : std::min(groups.size(), o.top);
    auto member = [&](size_t i) {
        const ProcessEntry& e = *procs[i];
        return std::pair(c.vm.format_pid(e.pid), printable(c.names.name(e.pid, e.c_p, e.reg_name, e.initial)));
    };

    if (o.json) {
        nlohmann::json j{{"vm_pid", c.vm.pid()},
                         {"otp_release", c.vm.release().major},
                         {"processes_total", table.processes.size()},
                         {"unreadable_processes", table.unreadable},
                         {"stacks_read", n.read},
                         {"not_walked", n.busy},
                         {"changed_while_read", n.changed},
                         {"exited_while_read", n.gone},
                         {"stack_unreadable", n.unreadable},
                         {"not_read_budget", n.not_read},
                         {"truncated", n.truncated},
                         {"read_twice", n.retried},
                         {"stray_words", n.stray},
                         {"words_read", n.words},
                         {"read_ms", read_ns / 1e6},
                         {"groups_total", groups.size()},
                         {"groups", nlohmann::json::array()}};
        for (size_t g = 0; g < shown; g++) {
            const StackGroup& group = groups[g];
            nlohmann::json frames = nlohmann::json::array(), members = nlohmann::json::array();
            for (uint32_t f : group.key.frames) frames.push_back(names.name(f));
            for (size_t i : group.first) {
                auto [pid, name] = member(i);
                members.push_back({{"pid", pid}, {"name", name}});
            }
            j["groups"].push_back(
                {{"count", group.count}, {"state", group.key.state}, {"frames", frames}, {"processes", members}});
        }
        std::cout << json_text(j, 1) << "\n";
        return 0;
    }

    fmt::print("{}\n", wrap_words(fmt::format("beam-bpf-procs: {} processes of {} {} (OTP {}), {} unreadable; {} "
                                              "stacks read in {:.1f} ms ({} words), {} groups",
                                              table.processes.size(), printable(c.vm.exe_name()), c.vm.pid(),
                                              c.vm.release().major, table.unreadable, n.read, read_ns / 1e6, n.words,
                                              groups.size()),
                                  o.columns));
    std::string also;
    if (n.busy)
        also += fmt::format(", {} running, collecting or exiting (not walked: the function the VM names)", n.busy);
    if (n.gone) also += fmt::format(", {} exited while read", n.gone);
    if (n.unreadable) also += fmt::format(", {} whose stack did not read", n.unreadable);
    if (n.truncated) also += fmt::format(", {} truncated at {} words", n.truncated, kStackWordsPerProcess);
    if (n.not_read) also += fmt::format(", {} not read (this run's {} words spent)", n.not_read, kRunWords);
    if (n.stray)
        also += fmt::format(", {} stack words tagged as return addresses into no known code (skipped)", n.stray);
    fmt::print("{}\n", wrap_words(fmt::format("beam-bpf-procs: {} processes changed while read (read twice, then left "
                                              "out){}",
                                              n.changed, also),
                                  o.columns));
    if (!c.names.unavailable().empty())
        fmt::print("beam-bpf-procs: warning: no names: {}\n", printable(c.names.unavailable()));
    const size_t width = groups.empty() ? 1 : fmt::formatted_size("{}", groups.front().count);
    for (size_t g = 0; g < shown; g++) {
        const StackGroup& group = groups[g];
        std::string who;
        if (group.count <= kNamed)
            for (size_t i : group.first) {
                auto [pid, name] = member(i);
                who += fmt::format("{}{}{}{}", who.empty() ? "  " : ", ", pid, name.empty() ? "" : " ", name);
            }
        fmt::print("\n{}\n",
                   wrap_words(fmt::format("{:>{}}  [{}]{}", group.count, width, group.key.state, who), o.columns));
        for (auto [f, times] : frame_runs(group.key.frames)) {
            if (times > 1) fmt::print("{:{}}    {} x{}\n", "", width, names.name(f), times);
            else fmt::print("{:{}}    {}\n", "", width, names.name(f));
        }
    }
    if (shown < groups.size()) {
        size_t left = keys.size();
        for (size_t g = 0; g < shown; g++) left -= groups[g].count;
        fmt::print("\n... {} more groups of {} processes (-t N, --all)\n", groups.size() - shown, left);
    }
    return 0;
}

}  // namespace bb
