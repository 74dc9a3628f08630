// Where each report format goes: -o FILE or stdout for one, -o PREFIX plus file_suffix() for
// several; "%t" in -o is the report's start time (UTC, 20261123T101500Z). Opened before
// attaching so a bad path fails fast; with --every, open() again for each interval.
#pragma once
#include <cstdint>
#include <fstream>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "report/report.hpp"
#include "run/options.hpp"

namespace bb {

class Output {
public:
    explicit Output(const CommonOptions& o);  // o resolved
    const std::vector<Format>& formats() const { return formats_; }
    bool has(Format f) const;
    void open(uint64_t start_unix_ns);
    std::ostream& stream(Format f);
    const std::vector<std::string>& paths() const { return paths_; }

private:
    std::string pattern_;
    std::vector<Format> formats_;
    std::vector<std::string> paths_;
    std::vector<std::unique_ptr<std::ofstream>> files_;  // one per format, or none: stdout
};

// Wall-clock time, ns since the epoch (a report's start).
uint64_t unix_now_ns();

}  // namespace bb
