// The agent's directory of profiles: one subdirectory per VM, one pprof file per interval.
#pragma once
#include <cstddef>
#include <string>

#include "agent/sinks.hpp"

namespace bb::agent {

// DIR/<dir_name>/<kind>-<start, UTC>.pb.gz (cpu-..., alloc-...), written to a temporary name in
// the same directory and renamed, so a reader never sees half a file; then only the newest
// `retention` files of that kind in that directory are kept.
class ProfileDir {
public:
    ProfileDir(std::string dir, size_t retention);
    // The path written; throws UserError when it cannot be written.
    std::string write(const FinishedProfile& p);
    void set_retention(size_t n) { retention_ = n; }
    const std::string& dir() const { return dir_; }

private:
    std::string dir_;
    size_t retention_;
};

}  // namespace bb::agent
