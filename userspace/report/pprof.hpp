// --format pprof: a gzip-compressed perftools.profiles.Profile (the profile.proto that
// Debian's golang-github-google-pprof-dev ships), read by `go tool pprof`, Pyroscope, Parca.
#pragma once
#include <ostream>
#include <string>

#include "profile/profile.hpp"

namespace bb {

void write_pprof(const Profile& p, std::ostream& out);
// `in` as a gzip stream (zlib's default level): the pprof's, and the agent's OTLP requests'.
std::string gzip(const std::string& in);

}  // namespace bb
