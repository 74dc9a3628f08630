// OTLP's profiles signal (opentelemetry-proto v1development, see proto/README.md): a Profile as
// one ExportProfilesServiceRequest, the body of an OTLP/HTTP export (beam-bpf-agent --otlp).
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "profile/profile.hpp"

namespace bb {

// A resource attribute: "service.name" = "shop", "process.pid" = 1234.
using OtlpAttribute = std::pair<std::string, std::variant<std::string, int64_t>>;

// The request's bytes: one resource (its attributes as given, the target's text made
// printable), one scope "beam-bpf", one profile. Its sample type is cpu/nanoseconds when a
// sample stands for CPU time (p.period_ns), else the unit counted; each Erlang frame carries
// profile.frame.type=beam, C code native, the kernel kernel (the semantic conventions' values);
// each sample its Erlang process (beam.process.pid, beam.process.name) and scheduler (thread.name).
std::string otlp_request(const Profile& p, const std::vector<OtlpAttribute>& resource);

}  // namespace bb
