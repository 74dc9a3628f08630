#include "target/proc_maps.hpp"

#include <cstdio>
#include <fstream>

namespace bb {

std::optional<Mapping> parse_maps_line(std::string_view line) {
    // "start-end perms offset major:minor inode   path", the path from its first character on
    // (it may hold spaces, and " (deleted)" at the end).
    std::string s(line.substr(0, 8192));
    Mapping m;
    char perms[8] = {};
    unsigned long long inode = 0;
    int path_at = 0;
    if (sscanf(s.c_str(), "%lx-%lx %7s %lx %x:%x %llu %n", &m.start, &m.end, perms, &m.offset, &m.dev_major,
               &m.dev_minor, &inode, &path_at) < 7 ||
        m.end < m.start)
        return std::nullopt;
    m.perms = perms;
    m.inode = inode;
    if (path_at > 0 && static_cast<size_t>(path_at) <= s.size()) m.path = s.substr(path_at);
    return m;
}

std::vector<Mapping> read_maps(pid_t pid) {
    std::vector<Mapping> maps;
    std::ifstream in("/proc/" + std::to_string(pid) + "/maps");
    std::string line;
    while (maps.size() < kMaxMappings && std::getline(in, line))
        if (auto m = parse_maps_line(line)) maps.push_back(std::move(*m));
    return maps;
}

}  // namespace bb
