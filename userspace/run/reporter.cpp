#include "run/reporter.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

namespace bb {

Reporter::Reporter(Session& s, const CommonOptions& o, const char* unit, TopOptions top)
    : s_(s), o_(o), unit_(unit), weigh_words_(std::string_view(unit) == "words"), top_(top),
      interval_start_ns_(s.start_ns) {}

void Reporter::tick(uint64_t now_ns) {
    if (o_.every > 0 && now_ns - interval_start_ns_ >= static_cast<uint64_t>(o_.every * 1e9)) write(now_ns);
}

void Reporter::finish(uint64_t now_ns) { write(now_ns); }

void Reporter::add(const bb_record& r, std::span<const uint32_t> frames) {
    Who who = who_of(r);
    if (who.erl_pid) s_.names.name(r);  // read now, while the process is likely alive
    if (weigh_words_)
        add_alloc(r, frames, who, strata_, agg_);
    else
        agg_.add(frames, 1, who);
}

void Reporter::write(uint64_t now_ns) {
    ProfileMeta m;
    m.title = fmt::format("{} {} (OTP {})", s_.vm.exe(), s_.vm.pid(), s_.vm.release().major);
    m.unit = unit_;
    if (m.unit == "samples") m.period_ns = o_.ns_per_sample;  // 0: counts only (cycles)
    m.start_unix_ns = s_.start_unix_ns + (interval_start_ns_ - s_.start_ns);
    m.duration_ns = now_ns - interval_start_ns_;
    m.lines = o_.lines;
    m.pid_text = [&](uint64_t pid) { return s_.vm.format_pid(pid); };
    m.process_text = [&](uint64_t pid) { return s_.names.known(pid); };
    if (o_.by_process) m.process_root = [&](uint64_t pid) { return s_.names.root_frame(pid); };
    m.sched_text = [](uint32_t sched) { return sched_name(sched >> 16, sched & 0xffff); };
    strata_.drain_into(agg_, s_.sym.unsampled_alloc());
    Profile p = agg_.profile(s_.sym.frames(), m);
    if (o_.every > 0) s_.out.open(m.start_unix_ns);
    for (Format f : s_.out.formats()) {
        std::ostream& os = s_.out.stream(f);
        if (f == Format::top && !heading_.empty()) os << heading_ << "\n";
        write_report(p, f, os, top_);
        os.flush();
        if (!os) throw UserError(fmt::format("cannot write the {} report: {}", file_suffix(f) + 1, std::strerror(errno)));
    }
    s_.out.commit();
    if (o_.every > 0)
        for (const auto& path : s_.out.paths())
            fmt::print(stderr, "{}: wrote {} ({} {})\n", tool_name(), path, agg_.total(), unit_);
    agg_.clear();
    interval_start_ns_ = now_ns;
}

}  // namespace bb
