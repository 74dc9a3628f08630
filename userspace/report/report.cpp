#include "report/report.hpp"

#include "report/html.hpp"
#include "report/pprof.hpp"
#include "report/speedscope.hpp"
#include "report/text.hpp"

namespace bb {

namespace {
constexpr std::pair<std::string_view, Format> kFormats[] = {
    {"top", Format::top}, {"folded", Format::folded}, {"pprof", Format::pprof},
    {"speedscope", Format::speedscope}, {"html", Format::html}};
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

void write_report(const Profile& p, Format f, std::ostream& out, const TopOptions& top) {
    switch (f) {
    case Format::top: return write_top(p, out, top.rows, top.by_total, top.erlang_only);
    case Format::folded: return write_folded(p, out);
    case Format::pprof: return write_pprof(p, out);
    case Format::speedscope: return write_speedscope(p, out);
    case Format::html: return write_html(p, out);
    }
}

}  // namespace bb
