#include "report/report.hpp"

#include "base/text.hpp"
#include "report/html.hpp"
#include "report/pprof.hpp"
#include "report/speedscope.hpp"
#include "report/text.hpp"

namespace bb {

namespace {
constexpr std::pair<std::string_view, Format> kFormats[] = {{"top", Format::top},
                                                            {"folded", Format::folded},
                                                            {"pprof", Format::pprof},
                                                            {"speedscope", Format::speedscope},
                                                            {"html", Format::html}};
}  // namespace

std::optional<Format> parse_format(std::string_view name) {
    for (const auto& [n, f] : kFormats)
        if (n == name) return f;
    return std::nullopt;
}

const char* format_names() { return "top, folded, pprof, speedscope, html"; }

const char* file_suffix(Format f) {
    switch (f) {
    case Format::top: return ".txt";
    case Format::folded: return ".folded";
    case Format::pprof: return ".pb.gz";
    case Format::speedscope: return ".speedscope.json";
    case Format::html: return ".html";
    }
    return "";
}

std::optional<Profile> printable_copy(const Profile& p) {
    auto clean = [](const std::string& s) { return is_printable(s); };
    bool all = clean(p.title) && clean(p.unit);
    for (const Function& f : p.functions)
        all = all && clean(f.name) && clean(f.system_name) && clean(f.file) && clean(f.mapping);
    for (const Sample& s : p.samples) all = all && clean(s.pid) && clean(s.process) && clean(s.scheduler);
    if (all) return std::nullopt;
    Profile q = p;
    q.title = printable(q.title);
    q.unit = printable(q.unit);
    for (Function& f : q.functions) {
        f.name = printable(f.name);
        f.system_name = printable(f.system_name);
        f.file = printable(f.file);
        f.mapping = printable(f.mapping);
    }
    for (Sample& s : q.samples) {
        s.pid = printable(s.pid);
        s.process = printable(s.process);
        s.scheduler = printable(s.scheduler);
    }
    return q;
}

void write_report(const Profile& profile, Format f, std::ostream& out, const TopOptions& top) {
    // The names in a profile are the target's text: escaped here once for every writer.
    std::optional<Profile> copy = printable_copy(profile);
    const Profile& p = copy ? *copy : profile;
    switch (f) {
    case Format::top: return write_top(p, out, top);
    case Format::folded: return write_folded(p, out);
    case Format::pprof: return write_pprof(p, out);
    case Format::speedscope: return write_speedscope(p, out);
    case Format::html: return write_html(p, out);
    }
}

}  // namespace bb
