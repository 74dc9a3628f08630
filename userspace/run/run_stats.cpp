#include "run/run_stats.hpp"
#include "run/output.hpp"

#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/text.hpp"
#include "sampling/counters.hpp"

namespace bb {

namespace {
std::vector<std::string> printable_all(std::vector<std::string> v) {
    for (auto& s : v) s = printable(s);
    return v;
}
}  // namespace

void RunStats::count(const bb_record& r) {
    records++;
    // -e alloc's totals are the GC entries' and the heap fragments': exact. A watchpoint's record
    // weighs an estimate. An off-CPU record's fields of the same place are its own.
    if (r.flags & BB_F_OFFCPU) {
        offcpu_ns_by_tid[r.tid] += r.BB_OFFCPU_NS;
    } else if (r.flags & BB_F_WATCH) {
        alloc_samples++;
        alloc_samples_by_heap[r.heap_owner]++;
        message_words += r.frag_words;
    } else {
        alloc_words += r.alloc_words;
        message_words += r.frag_words;
    }
    if (r.flags & BB_F_TRUNCATED) truncated++;
    if (r.flags & BB_F_BAD_PROC) unreadable++;
    if (r.flags & BB_F_NOT_RUNNING) not_running++;
    if (r.flags & BB_F_IN_GC) in_gc++;
    if (r.flags & BB_F_EXITING) exiting++;
    if (r.flags & BB_F_FP_WALK) fp_walked++;
    native_frames += r.nnative;
    if (r.flags & BB_F_NATIVE_NO_ROW) native_no_row++;
    if (r.flags & BB_F_NATIVE_BAD) native_bad++;
    if (r.flags & BB_F_NATIVE_TRUNCATED) native_truncated++;
    if (r.flags & BB_F_BLAME_SCAN) blame_scan++;
}

void print_summary(const RunStats& s, const SamplerCounters& c, const Symbolizer& sym, const char* what) {
    fmt::print(stderr,
               "{}: {} {} in {:.1f} s, {} dropped, {} truncated, {} unsymbolized frames, "
               "{} unreadable processes{}{}{}\n",
               tool_name(), s.records, what, s.seconds, c.bpf[BB_C_DROPPED], s.truncated, sym.unsymbolized(),
               s.unreadable, s.vm_exited ? "; the VM exited during the run, this is what was collected" : "",
               c.handler_errors
                   ? fmt::format("; {} records lost to errors (first: {})", c.handler_errors, c.first_handler_error)
                   : "",
               s.error.empty() ? "" : "; stopped early: " + s.error + ", this is what was collected");
}

void write_stats(const CommonOptions& o, const RunStats& s, const SamplerCounters& c, const Symbolizer& sym,
                 const std::function<std::string(uint64_t)>& pid_text) {
    if (o.stats_file.empty()) return;
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    const uint64_t seen = c.bpf[BB_C_SEEN];
    nlohmann::json j = {
        {"records", s.records},
        {"seconds", s.seconds},
        {"first_record_s", s.first_record_s},
        {"attach_ms", s.attach_ms},  // [[step, ms], ...] in the order they ran
        {"event", event_name(o.event)},
        {"events", c.events},
        {"bpf_prog_run_cnt", c.prog_run_cnt},
        {"truncated", s.truncated},
        {"unreadable", s.unreadable},
        {"attributed_in_gc", s.in_gc},
        {"attributed_exiting", s.exiting},
        {"not_running", s.not_running},
        {"alloc_words", s.alloc_words},
        {"message_words", s.message_words},
        {"alloc_samples", s.alloc_samples},
        {"handler_errors", c.handler_errors},
        {"fp_walked", s.fp_walked},
        {"native_frames", s.native_frames},
        {"native_unwind_stopped", s.native_no_row + s.native_bad + s.native_truncated},
        {"native_no_row", s.native_no_row},
        {"native_bad_rule", s.native_bad},
        {"native_truncated", s.native_truncated},
        {"blame_by_scan", s.blame_scan},
        {"unwind_rows", sym.unwind() ? sym.unwind()->rows() : 0},
        {"unwind_files", sym.unwind() ? sym.unwind()->modules().size() : 0},
        {"unwind_table_bytes", sym.unwind() ? sym.unwind()->table_bytes() : 0},
        {"unwind_skipped", printable_all(sym.unwind() ? sym.unwind()->skipped() : std::vector<std::string>{})},
        {"unsymbolized_frames", sym.unsymbolized()},
        {"bpf_walk_ns_mean", seen ? double(c.bpf[BB_C_WALK_NS]) / seen : 0.0},
        {"bpf_walk_ns_log2_hist", c.walk_hist},
        // Of the handler time, what unwinding native frames took: per native frame.
        {"bpf_ns_per_native_frame", s.native_frames ? double(c.bpf[BB_C_NATIVE_NS]) / s.native_frames : 0.0},
        {"peak_rss_kib", ru.ru_maxrss},
        {"user_cpu_s", ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6},
        {"sys_cpu_s", ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6},
        {"jit_modules", sym.jit().module_count()},
        {"vm_exited", s.vm_exited},
        {"error", s.error},
    };
    if (s.sched_states) {
        nlohmann::json states = nlohmann::json::object();
        for (size_t i = 0; i < kSchedStates; i++) states[std::string(kSchedStateNames[i])] = (*s.sched_states)[i];
        j["scheduler_states"] = states;
    }
    if (o.event == Event::offcpu) {
        uint64_t all = 0;
        nlohmann::json by_tid = nlohmann::json::object();
        for (const auto& [tid, ns] : s.offcpu_ns_by_tid) {
            by_tid[std::to_string(tid)] = ns;
            all += ns;
        }
        j["offcpu_ns"] = all;
        j["offcpu_ns_by_tid"] = by_tid;
        j["offcpu_window_ns"] = {s.offcpu_from_ns, s.offcpu_to_ns};
    }
    if (c.alloc_watch) {
        // The 10 heaps with the most samples.
        std::vector<std::pair<uint64_t, uint64_t>> heaps(s.alloc_samples_by_heap.begin(),
                                                         s.alloc_samples_by_heap.end());
        std::sort(heaps.begin(), heaps.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
        heaps.resize(std::min<size_t>(heaps.size(), 10));
        nlohmann::json by_heap = nlohmann::json::object();
        for (const auto& [pid, n] : heaps) by_heap[pid_text(pid)] = n;
        j["alloc_samples_by_heap"] = by_heap;
        const AllocWatchCounters& w = *c.alloc_watch;
        j["alloc_watch"] = {{"flips", w.flips}, {"sampled", w.sampled}, {"missed", w.missed},
                            {"late", w.late},   {"stack", w.stack},     {"expired", w.expired}};
    }
    // The walker's counters, each under its key (sampling/counters.hpp). unreadable_by_cause:
    // why processes did not pass the walker's checks, by the first check failed, of every sample
    // it saw. Of these, the in_gc and exiting ones are attributed to their process all the same,
    // under [gc] or [exiting]; "unreadable" above is what is left, the records under
    // [unreadable Erlang process].
    for (const CounterInfo& k : kCounters) {
        if (k.group == StatsGroup::none || (k.group == StatsGroup::alloc_watch && !c.alloc_watch)) continue;
        (k.group == StatsGroup::top ? j : j[k.group_key])[k.key] = c.bpf[k.id];
    }
    // Its strings (paths, skipped libraries) are the target's: never a throw on bytes that are
    // not UTF-8. Written whole or not at all, never through a planted link.
    write_file_atomically(o.stats_file, json_text(j, 2) + "\n");
}

}  // namespace bb
