// What every report is written from: the run's stacks over a table of functions and
// locations (module, function, arity, file, line), not preformatted strings. Built once at
// the end of a run (or of each --every interval) by the aggregator; the writers in this folder
// only read it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "profile/kinds.hpp"

namespace bb {

enum class FrameKind : uint8_t {
    erlang,  // an Erlang (or Elixir) function in JIT code
    native,  // C code of beam.smp, a NIF or a shared library
    kernel,  // time in the kernel ("[kernel]")
    vm,      // the VM's own pseudo frames: JIT shared code, "[unknown JIT code]", a process root
};

struct Function {
    FrameKind kind = FrameKind::erlang;
    std::string name;         // as shown: "MyApp.Repo.all/2", "lists:foldl/3", "erts_garbage_collect"
    std::string system_name;  // as the VM names it: "'Elixir.MyApp.Repo':all/2" (== name if no other)
    std::string file;         // "lists.erl", or empty
    uint32_t start_line = 0;  // first line of the function's code, 0 if unknown
    std::string mapping;      // where its code is: "beam.smp", "[JIT] lists", "libc.so.6", "[kernel]"
};

struct Location {
    uint32_t function;  // index into Profile::functions
    uint32_t line = 0;  // 0: unknown (or --lines not asked for)
};

// A frame as text: "name", or "name (file:LINE)" when lines are told apart and known.
inline std::string frame_label(const Function& f, uint32_t line, bool lines) {
    if (!lines || line == 0 || f.file.empty()) return f.name;
    return f.name + " (" + f.file + ":" + std::to_string(line) + ")";
}

struct Sample {
    std::vector<uint32_t> stack;  // indices into Profile::locations, root first; never empty
    uint64_t count = 0;
    // Who ran it; empty when unknown (a scheduler's own code) or not collected.
    std::string pid;        // "<0.85.0>"
    std::string process;    // registered name, label or initial call
    std::string scheduler;  // "scheduler 1", "dirty cpu scheduler 2"
};

struct Profile {
    std::vector<Function> functions;
    std::vector<Location> locations;
    std::vector<Sample> samples;
    // What the counts are: names its entry in profile/kinds.hpp ("samples", "words", "wall", ...).
    std::string unit = "samples";
    uint64_t period_ns = 0;      // CPU time one sample stands for; 0 when counts are not time
    uint64_t start_unix_ns = 0;  // wall clock at the start of the profiled interval
    uint64_t duration_ns = 0;
    std::string title;  // "beam.smp 1234 (OTP 27)": shown by viewers
    // Labels of the whole profile, which pprof can only carry on each sample (beam-bpf-agent:
    // host, node, service_name, ...); empty values are left out.
    std::vector<std::pair<std::string, std::string>> labels;
    bool lines = false;  // --lines: frames are per line, shown "name (file:LINE)"

    // The frame text of a location as folded stacks and the top table show it.
    std::string label(uint32_t location) const {
        return frame_label(functions[locations[location].function], locations[location].line, lines);
    }
    // The line viewers show for a location: its own with --lines, else where its function
    // starts (a frame merged by label stands for the whole function).
    uint32_t shown_line(uint32_t location) const {
        const Location& l = locations[location];
        return lines && l.line ? l.line : functions[l.function].start_line;
    }
    const ProfileKind& kind() const { return kind_of(unit); }
    uint64_t total() const {
        uint64_t n = 0;
        for (const Sample& s : samples) n += s.count;
        return n;
    }
};

// The frames of viewers that merge by label (the flame graph, speedscope): with --lines two
// lines of one function are two frames, without it all of a function's locations are one.
// Numbered in label order, so that sorting stacks of frame numbers sorts callees by name.
struct LabelFrames {
    std::vector<std::string> labels;    // frame -> label
    std::vector<uint32_t> location;     // frame -> its first location (file, line, kind)
    std::vector<uint32_t> of_location;  // location -> frame
};
inline LabelFrames label_frames(const Profile& p) {
    LabelFrames f;
    std::vector<std::string> of(p.locations.size());
    for (uint32_t i = 0; i < of.size(); i++) of[i] = p.label(i);
    f.labels = of;
    std::sort(f.labels.begin(), f.labels.end());
    f.labels.erase(std::unique(f.labels.begin(), f.labels.end()), f.labels.end());
    f.location.assign(f.labels.size(), UINT32_MAX);
    for (uint32_t i = 0; i < of.size(); i++) {
        auto frame = static_cast<uint32_t>(std::lower_bound(f.labels.begin(), f.labels.end(), of[i]) -
                                           f.labels.begin());
        f.of_location.push_back(frame);
        if (f.location[frame] == UINT32_MAX) f.location[frame] = i;
    }
    return f;
}

}  // namespace bb
