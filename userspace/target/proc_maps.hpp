// The target's address space as /proc/PID/maps tells it: the one parser of that file. Its
// files are opened from these mappings by target/target_file.hpp only, never by their names.
// The target controls what it maps and the names of its files: the reader is bounded and a
// line it cannot parse is skipped.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bb {

struct Mapping {
    uint64_t start = 0, end = 0, offset = 0;
    std::string perms;  // "r-xp"
    uint32_t dev_major = 0, dev_minor = 0;
    uint64_t inode = 0;
    std::string path;  // "" for anonymous memory; "[heap]", "/memfd:vmem (deleted)", ...
    bool executable() const { return perms.size() >= 3 && perms[2] == 'x'; }
    // A file of the target's (an absolute path), still linked.
    bool is_file() const { return !path.empty() && path[0] == '/' && !deleted(); }
    bool deleted() const { return path.ends_with(" (deleted)"); }
};

// One line of /proc/PID/maps; nullopt for one it cannot parse.
std::optional<Mapping> parse_maps_line(std::string_view line);
// Every mapping of `pid`, in address order (at most kMaxMappings: the kernel's own default
// vm.max_map_count is 65530). Empty when the process is gone.
std::vector<Mapping> read_maps(pid_t pid);
inline constexpr size_t kMaxMappings = 1u << 18;

}  // namespace bb
