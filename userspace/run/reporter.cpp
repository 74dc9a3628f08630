#include "run/reporter.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <map>

#include "base/text.hpp"

namespace bb {

Reporter::Reporter(Session& s, const CommonOptions& o, const char* unit, TopOptions top)
    : s_(s),
      o_(o),
      unit_(unit),
      weigh_words_(kind_of(unit).words),
      top_(top),
      strata_(alloc_interval(o), s.alloc_exits),
      interval_start_ns_(s.start_ns) {}

void Reporter::tick(uint64_t now_ns) {
    if (o_.every > 0 && now_ns - interval_start_ns_ >= static_cast<uint64_t>(o_.every * 1e9)) write(now_ns);
}

void Reporter::finish(uint64_t now_ns) { write(now_ns); }

std::optional<std::array<double, kSchedStates>> Reporter::run_states(uint64_t now_ns) const {
    if (!schedulers_ || !run_states_.total()) return std::nullopt;
    return run_states_.shares(o_.ns_per_sample, now_ns - s_.start_ns, schedulers_);
}

void Reporter::add(const bb_record& r, std::span<const uint32_t> frames, uint64_t weight) {
    Who who = who_of(r);
    if (who.erl_pid) s_.names.name(r);  // read now, while the process is likely alive
    if (schedulers_ && r.sched_type == BB_SCHED_NORMAL) {
        const SchedState state = s_.sym.sched_state(r, frames);
        states_.add(state, weight);
        run_states_.add(state, weight);
    }
    if (weigh_words_) add_alloc(r, frames, who, strata_, agg_);
    else agg_.add(frames, weight, who);
}

namespace {

// Said once a run when this share of the samples ends in native code with no name, in a run of
// enough samples for the share to mean something.
constexpr double kUnnamedHint = 0.05;
constexpr uint64_t kUnnamedHintSamples = 100;

// How many samples end in native code that has no symbol ("beam.smp+0x203470"), and the file
// most of them are in.
std::pair<uint64_t, std::string> unnamed_native(const Profile& p) {
    std::map<std::string, uint64_t> by_file;
    uint64_t n = 0;
    for (const Sample& s : p.samples) {
        const Function& f = p.functions[p.locations[s.stack.back()].function];
        if (f.kind != FrameKind::native || (f.name.find("+0x") == std::string::npos && !f.name.starts_with("[")))
            continue;
        n += s.count;
        by_file[f.mapping] += s.count;
    }
    auto most = std::max_element(by_file.begin(), by_file.end(), [](auto& a, auto& b) { return a.second < b.second; });
    return {n, most == by_file.end() ? "" : most->first};
}

}  // namespace

void Reporter::write(uint64_t now_ns) {
    ProfileMeta m;
    m.title = fmt::format("{} {} (OTP {})", s_.vm.exe(), s_.vm.pid(), s_.vm.release().major);
    m.unit = unit_;
    if (!kind_of(unit_).period_type.empty()) m.period_ns = o_.ns_per_sample;  // 0: counts only (cycles)
    m.start_unix_ns = s_.start_unix_ns + (interval_start_ns_ - s_.start_ns);
    m.duration_ns = now_ns - interval_start_ns_;
    m.lines = o_.lines;
    m.pid_text = [&](uint64_t pid) { return s_.vm.format_pid(pid); };
    m.process_text = [&](uint64_t pid) { return s_.names.known(pid); };
    // Grouped by name unless --by-pid: a pool of hundreds of tasks is one root, not hundreds, and
    // the processes of a kind (RabbitMQ's 200 {rabbit_channel,...}) are one too.
    if (o_.by_pid) {
        m.process_root = [&](uint64_t pid) { return s_.names.root_frame(pid); };
    } else if (o_.by_process) {
        m.process_root = [&](uint64_t pid) {
            const std::string& n = s_.names.known(pid);
            return n.empty() ? s_.vm.format_pid(pid) : n;
        };
        m.process_kind = [&](uint64_t pid) { return s_.names.kind(pid); };
    }
    m.sched_text = [](uint32_t sched) { return sched_name(sched >> 16, sched & 0xffff); };
    strata_.drain_into(agg_, s_.sym.unsampled_alloc());
    Profile p = agg_.profile(s_.sym.frames(), m);
    if (!hinted_unnamed_ && p.total() >= kUnnamedHintSamples) {
        auto [unnamed, file] = unnamed_native(p);
        if (unnamed >= kUnnamedHint * static_cast<double>(p.total())) {
            hinted_unnamed_ = true;
            fmt::print(stderr,
                       "{0}: {1:.0f}% of the samples end in native code of {2} that has no symbols:\n"
                       "{0}: install its debug file (-dbgsym) or set DEBUGINFOD_URLS=https://debuginfod.debian.net\n",
                       tool_name(), 100.0 * static_cast<double>(unnamed) / static_cast<double>(p.total()),
                       printable(file));
        }
    }
    if (o_.every > 0) s_.out.open(m.start_unix_ns);
    for (Format f : s_.out.formats()) {
        std::ostream& os = s_.out.stream(f);
        // Prose wrapped and rows cut to a terminal's width (COLUMNS, or stdout's tty); a file or a
        // pipe gets them whole.
        TopOptions top = top_;
        top.columns = s_.out.to_stdout() ? output_columns() : 0;
        if (f == Format::top && !heading_.empty()) os << wrap_words(heading_, top.columns) << "\n";
        if (f == Format::top && states_.total())
            os << wrap_words(fmt::format("Normal schedulers ({}), their time as msacc splits it: {}", schedulers_,
                                         SchedStates::text(states_.shares(o_.ns_per_sample, now_ns - interval_start_ns_,
                                                                          schedulers_))),
                             top.columns)
               << "\n";
        write_report(p, f, os, top);
        os.flush();
        if (!os)
            throw UserError(fmt::format("cannot write the {} report: {}", file_suffix(f) + 1, std::strerror(errno)));
    }
    s_.out.commit();
    // Every file written, -o FILE's too: which file, and what it holds. (None for stdout.)
    const ProfileKind& kind = kind_of(unit_);
    const double seconds = static_cast<double>(agg_.total()) / 1e9;
    const std::string held = kind.timed ? fmt::format("{:.1f} {}", seconds, kind.seconds)
                                        : fmt::format("{} {}", agg_.total(), unit_);
    for (const auto& path : s_.out.paths()) fmt::print(stderr, "{}: wrote {} ({})\n", tool_name(), path, held);
    agg_.clear();
    states_.clear();
    interval_start_ns_ = now_ns;
}

}  // namespace bb
