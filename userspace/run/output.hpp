// Where each report format goes: -o FILE or stdout for one, -o PREFIX plus file_suffix() for
// several; "%t" in -o is the report's start time (UTC, 20261123T101500Z). The directory is
// checked before attaching so a bad path fails fast; with --every, open() again for each
// interval. Reports are written whole or not at all (write_file_atomically).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "report/report.hpp"
#include "run/options.hpp"

namespace bb {

class Output {
public:
    explicit Output(const CommonOptions& o);  // o resolved
    Output(const Output&) = delete;
    Output& operator=(const Output&) = delete;
    const std::vector<Format>& formats() const { return formats_; }
    bool has(Format f) const;
    // Starts this interval's reports (held in memory until commit()).
    void open(uint64_t start_unix_ns);
    std::ostream& stream(Format f);
    // Whether the reports go to stdout (no -o, or -o -): only there do they fit a terminal.
    bool to_stdout() const { return pattern_.empty() || pattern_ == "-"; }
    // Writes each report to its file with write_file_atomically(); UserError if one fails.
    void commit();
    const std::vector<std::string>& paths() const { return paths_; }

private:
    std::string pattern_;
    std::vector<Format> formats_;
    std::vector<std::string> paths_;
    std::vector<std::unique_ptr<std::ostringstream>> reports_;  // one per format, or none: stdout
};

// Writes `bytes` to `path` so that a reader sees the old file or the whole new one, never part:
// a temporary file in the same directory, created with O_EXCL (so never through a symlink or
// over anything planted there), then rename() over `path`, which replaces a symlink planted at
// `path` (in a sticky, world-writable /tmp, say) instead of writing through it. A character
// device or a FIFO at `path` (-o /dev/null) is written in place, never replaced; another file
// that is not a regular one is refused. UserError on failure, naming `path`.
// `access`: the file's mode and group when they are not the umask's and the writer's (the
// agent's private profiles: 0600, or 0640 for --output-group).
struct FileAccess {
    mode_t mode = 0;                       // 0: 0666 less the umask
    gid_t group = static_cast<gid_t>(-1);  // -1: the writer's
};
void write_file_atomically(const std::string& path, std::string_view bytes, FileAccess access = {});

// Wall-clock time, ns since the epoch (a report's start).
uint64_t unix_now_ns();

}  // namespace bb
