// The -e events of beam-bpf-sample, one entry each in one list (event_modes()): its name and
// help, its profile's kind, the option only it takes, its checks and defaults, its words on the
// attach line and what it asks of the sampler. The option parser, resolve(), describe_event(),
// sampler_config() and beam-bpf-blame read the entry; a new mode is a new entry (and its run
// loop, where the perf-event one does not fit), and nothing else names it.
#pragma once
#include <span>
#include <string>
#include <string_view>

#include "run/options.hpp"

namespace bb {

struct EventMode {
    Event event;
    const char* name;  // -e NAME
    const char* help;  // in -e's --help, after the name
    const char* kind;  // its profile's entry in profile/kinds.hpp (kind_of())
    // Sampled by a perf event on each VM thread (-F or --period): the events beam-bpf-blame and
    // --pstack take.
    bool perf_sampled;
    bool cpu_time;  // a sample stands for 1/F s (or --period ns) of CPU time (CommonOptions::ns_per_sample)
    // The option that only this event takes, and whether it was given (both nullptr: none).
    const char* own_option;
    bool (*own_option_given)(const CommonOptions&) = nullptr;
    // Checks the options this event refuses and sets its defaults; throws UserError.
    void (*resolve)(CommonOptions&);
    // Its words on the attach line: short, or in full (-v).
    std::string (*describe)(const CommonOptions&, bool verbose);
    // What it asks of the sampler, beside what every event asks.
    void (*configure)(const CommonOptions&, SamplerConfig&);
};

std::span<const EventMode> event_modes();
const EventMode& mode_of(Event e);
// nullptr for a name no event has.
const EventMode* mode_named(std::string_view name);
// "cpu-clock, cycles, ... and offcpu": every event's name, or the perf-sampled ones', the last
// after `last`.
std::string event_names(bool perf_sampled_only = false, const char* last = "and");
// -e's --help: each event's name and help.
std::string events_help();

}  // namespace bb
