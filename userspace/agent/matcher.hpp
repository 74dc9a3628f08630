// --match: which VMs the agent follows. RE2 patterns (https://github.com/google/re2/wiki/Syntax),
// not std::regex: the texts come from processes the agent does not trust, and libstdc++'s
// std::regex recurses once per character of the text (a 40 KB command line crashed the agent).
// RE2 runs in time linear in the text and never recurses on it.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "target/discovery.hpp"

namespace re2 {
class RE2;
}

namespace bb::agent {

// The command line bytes a pattern is matched against: the first ones are what names a VM.
inline constexpr size_t kMatchedCmdline = 4096;

class Matcher {
public:
    // Compiled once (per configuration); UserError naming the first invalid pattern.
    explicit Matcher(const std::vector<std::string>& patterns);
    ~Matcher();
    Matcher(Matcher&&) noexcept;
    Matcher& operator=(Matcher&&) noexcept;

    // Why `pattern` is no valid --match ("" when it is): for the configuration's check.
    static std::string error(const std::string& pattern);

    // Whether any pattern is found (searched for, not matched whole) in one of `texts`.
    bool found(const std::vector<std::string_view>& texts) const;
    // Whether the agent follows this VM: no pattern, or one found in its command line (its
    // first kMatchedCmdline bytes, arguments joined by spaces), node name or cgroup path.
    bool wanted(const BeamProcess& p, const VmLabels& l) const;

private:
    std::vector<std::unique_ptr<re2::RE2>> res_;
};

// The first `max` bytes of argv joined by spaces.
std::string joined_cmdline(const std::vector<std::string>& argv, size_t max = kMatchedCmdline);

}  // namespace bb::agent
