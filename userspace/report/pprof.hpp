// --format pprof: a gzip-compressed perftools.profiles.Profile (the profile.proto that
// Debian's golang-github-google-pprof-dev ships), read by `go tool pprof`, Pyroscope, Parca.
#pragma once
#include <ostream>

#include "profile/profile.hpp"

namespace bb {

void write_pprof(const Profile& p, std::ostream& out);

}  // namespace bb
