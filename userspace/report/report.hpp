// --format: which writer of this folder turns the Profile into the output.
#pragma once
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "profile/profile.hpp"

namespace bb {

enum class Format { top, folded, pprof, speedscope, html };

std::optional<Format> parse_format(std::string_view name);
const char* format_names();  // "top, folded, pprof, speedscope, html"
inline bool is_binary(Format f) { return f == Format::pprof; }
// What -o PREFIX gets for each format when several are asked for: ".txt", ".pb.gz", ...
const char* file_suffix(Format f);

struct TopOptions {
    size_t rows = 20;
    bool by_total = false;     // beam-bpf-blame: "which code is on the stack"
    bool erlang_only = false;  // and only its Erlang functions
    bool flat = false;         // every frame ranked by its own time (else Erlang first)
    // -e wall's table alone: its places and processes leave out the idle (the leaves below), which
    // the heading sums; the called processes keep them (a callee's own time, idle or not).
    bool hide_idle = false;
    size_t columns = 0;  // rows cut to fit a terminal's width (base/text.hpp output_columns); 0: whole
};

// -e wall's leaves of an idle process (run/wall_profile.cpp makes them): waiting in a receive
// with nothing queued, or hibernated.
inline constexpr std::string_view kIdleReceiveLeaf = "[receive, queue 0]", kHibernatedLeaf = "[hibernated]";

// Every string of the profile (names, files, mappings, processes: the target's text) printable
// (base/text.hpp) before any writer sees it.
void write_report(const Profile& p, Format f, std::ostream& out, const TopOptions& top);
// The profile with every string printable; nullopt when it is already (no copy).
std::optional<Profile> printable_copy(const Profile& p);

}  // namespace bb
