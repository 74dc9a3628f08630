#include "agent/matcher.hpp"

#include <fmt/format.h>
#include <re2/re2.h>

#include "base/error.hpp"

namespace bb::agent {

namespace {

RE2::Options options() {
    RE2::Options o;
    o.set_log_errors(false);  // an invalid pattern is said once, by the configuration's check
    o.set_never_capture(true);
    return o;  // RE2's default memory bound (8 MiB a pattern) limits what a huge pattern compiles to
}

}  // namespace

Matcher::Matcher(const std::vector<std::string>& patterns) {
    for (const std::string& p : patterns) {
        auto re = std::make_unique<RE2>(p, options());
        if (!re->ok()) throw UserError(fmt::format("--match {}: not an RE2 regular expression: {}", p, re->error()));
        res_.push_back(std::move(re));
    }
}

Matcher::~Matcher() = default;
Matcher::Matcher(Matcher&&) noexcept = default;
Matcher& Matcher::operator=(Matcher&&) noexcept = default;

std::string Matcher::error(const std::string& pattern) {
    RE2 re(pattern, options());
    return re.ok() ? "" : re.error();
}

bool Matcher::found(const std::vector<std::string_view>& texts) const {
    for (const auto& re : res_)
        for (std::string_view t : texts)
            if (RE2::PartialMatch(re2::StringPiece(t.data(), t.size()), *re)) return true;
    return false;
}

bool Matcher::wanted(const BeamProcess& p, const VmLabels& l) const {
    if (res_.empty()) return true;
    const std::string cmdline = joined_cmdline(p.argv);
    std::vector<std::string_view> texts{cmdline};
    if (!l.node.empty()) texts.push_back(l.node);
    if (!l.cgroup.empty()) texts.push_back(l.cgroup);
    return found(texts);
}

std::string joined_cmdline(const std::vector<std::string>& argv, size_t max) {
    std::string out;
    for (const std::string& a : argv) {
        if (out.size() >= max) break;
        if (!out.empty()) out += ' ';
        out.append(a, 0, max - std::min(max, out.size()));
    }
    out.resize(std::min(out.size(), max));
    return out;
}

}  // namespace bb::agent
