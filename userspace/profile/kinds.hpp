// The kinds of profile the tools make, one entry each: what a profile's counts are, and every
// name they go by in reports, file formats, stores and the agent's files. Profile::unit names
// the entry; the writers (report/), beam-bpf-sample's reporter and the agent read these fields
// instead of naming a kind, so a new kind of profile is one entry in kinds.cpp.
#pragma once
#include <span>
#include <string_view>

namespace bb {

struct ProfileKind {
    std::string_view unit = {};         // Profile::unit, and the unit the report lines give counts in
    std::string_view agent_name = {};   // beam-bpf-agent's -e word and its files' kind; "" if not one of its
    std::string_view sample_type = {};  // pprof's and OTLP's first sample type
    // A sample stands for Profile::period_ns of CPU time (when the run has one): pprof's and
    // OTLP's period type, this name in nanoseconds.
    std::string_view period_type = {};
    bool timed = false;             // counts are nanoseconds (of process time, or of a thread blocked)
    bool process_time = false;      // nanoseconds of Erlang process time: process-seconds, its own top table
    bool words = false;             // counts are heap words: also as bytes (alloc_space), the default view
    std::string_view time_of = {};  // timed: what the nanoseconds are, after a duration ("of process time")
    std::string_view seconds = {};  // timed: what their sum is in seconds ("process-seconds")
    std::string_view title = {};    // what the agent's profile title adds: ", words allocated"
    // Pyroscope's sample_type_config for the agent's pushes: the type it shows, and its units.
    std::string_view pyroscope_type = {}, pyroscope_units = {};
};

std::span<const ProfileKind> profile_kinds();
// The entry of a Profile::unit; the first (CPU samples) for a unit not in the list.
const ProfileKind& kind_of(std::string_view unit);
// The entry the agent's -e word names; nullptr for a word that names none.
const ProfileKind* agent_kind(std::string_view name);

}  // namespace bb
