// The agent's directory of profiles: one subdirectory per VM, one pprof file per interval.
//
// Profiles name functions, processes, nodes and cgroups, of VMs other users run: they are the
// agent's alone (files 0600 in 0700 directories), or its and one group's (0640 in 0750,
// --output-group). The disk they take is bounded: a count per VM and kind, a total in bytes,
// an age; the directory of a VM that exited goes with its last file.
#pragma once
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

#include "agent/sinks.hpp"
#include "run/output.hpp"

namespace bb::agent {

struct Retention {
    size_t files = 60;               // per VM directory and kind (0: no count bound)
    uint64_t bytes = 1ull << 30;     // all VMs' files together
    uint64_t age_s = 7 * 24 * 3600;  // by modification time
};

class ProfileDir {
public:
    // `group`: a group name that may read, or "" for none. UserError when the directory cannot
    // be made or written.
    ProfileDir(std::string dir, Retention retention, const std::string& group = "");
    // DIR/<dir_name>/<kind>-<start, UTC>.pb.gz (cpu-..., alloc-...), written to a temporary
    // name in the same directory and renamed, so a reader never sees half a file; then only the
    // newest `retention.files` of that kind in that directory are kept. The path written;
    // UserError when it cannot be written.
    std::string write(const FinishedProfile& p);
    // The bytes and age bounds over every VM's files, the oldest removed first; then the empty
    // directories of VMs not in `live` (dir_name of each VM followed now). Returns the files
    // removed. Never follows a link, and removes only the names it writes.
    size_t sweep(const std::set<std::string>& live, int64_t now_unix_s);
    void set_retention(Retention r) { retention_ = r; }
    const std::string& dir() const { return dir_; }
    // The mode and group of a file the agent writes (profiles, stats).
    FileAccess file_access() const { return {group_ == static_cast<gid_t>(-1) ? 0600u : 0640u, group_}; }
    // "": the top directory is not readable by others; else a line saying it is.
    const std::string& warning() const { return warning_; }

private:
    void make_private_dir(const std::string& path) const;

    std::string dir_;
    Retention retention_;
    gid_t group_ = static_cast<gid_t>(-1);
    std::string warning_;
};

}  // namespace bb::agent
