#include "base/usage.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "base/closest.hpp"
#include "base/error.hpp"
#include "base/text.hpp"

namespace bb {

namespace {

// Every spelling of the app's options: "--by-process", "-o".
std::vector<std::string> option_names(const CLI::App& app) {
    std::vector<std::string> out;
    for (const CLI::Option* opt : app.get_options()) {
        for (const std::string& n : opt->get_lnames()) out.push_back("--" + n);
        for (const std::string& n : opt->get_snames()) out.push_back("-" + n);
    }
    return out;
}

}  // namespace

int usage_error(const CLI::App& app, const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // CLI11's text may run over lines; the words of it that look like options are what was typed.
    std::string text = e.what();
    for (char& c : text)
        if (c == '\n') c = ' ';
    if (dynamic_cast<const CLI::ExtrasError*>(&e)) {
        // CLI11 lists them last first ("... not expected: 99 --frequncy"): as they were typed.
        std::vector<std::string> args;
        std::istringstream in(text.substr(text.find(": ") == std::string::npos ? 0 : text.find(": ") + 2));
        for (std::string w; in >> w;) args.insert(args.begin(), w);
        text = fmt::format("{} {}", args.size() == 1 ? "unexpected argument" : "unexpected arguments", join(args, " "));
    }
    std::string hint;
    const std::vector<std::string> names = option_names(app);
    std::istringstream words(text);
    for (std::string w; words >> w && hint.empty();) {
        if (!w.starts_with('-') || w == "-" || w == "--") continue;
        std::string typed = w.substr(0, w.find('='));
        if (std::find(names.begin(), names.end(), typed) != names.end()) continue;
        if (std::string meant = slip_of(typed, names); !meant.empty()) hint = "; did you mean " + meant + "?";
    }
    fmt::print(stderr, "{}: error: {}{} (see --help)\n", tool_name(), printable(text), hint);
    return kUsageExit;
}

}  // namespace bb
