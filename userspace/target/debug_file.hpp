// A stripped binary's separate debug file, found by its build-id only: the host's
// /usr/lib/debug/.build-id/xx/yyyy.debug, then debuginfod when DEBUGINFOD_URLS is set. Never by
// a path or a debuglink the target names: the target writes those, the build-id is checked.
#pragma once
#include <string>

#include "base/error.hpp"

namespace bb {

struct DebugFile {
    std::string path;    // a host file, or debuginfod's cached copy
    std::string source;  // "/usr/lib/debug" or "debuginfod", for messages
};

// The debug file of `build_id` (lower-case hex), checked to carry that build-id. When none is
// found, the Fail says where it looked, for an error that tells what to install.
Result<DebugFile> find_debug_file(const std::string& build_id);

}  // namespace bb
