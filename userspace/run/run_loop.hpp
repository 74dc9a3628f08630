// The run loop: drain the sampler's ring, symbolize each record into frames, hand them on,
// until a deadline, a signal, the VM's exit or the caller's `done`.
#pragma once
#include <cstdint>
#include <functional>
#include <span>

#include "run/run_stats.hpp"
#include "run/session.hpp"

namespace bb {

// Drains the session's sampler until `duration` (0: no limit), SIGINT/SIGTERM, the VM's exit, or
// `done` returning true. Each record (of --process only: BPF drops the others) is symbolized
// into root-first frame ids and handed to `on_stack`; `tick` gets the monotonic time once per
// drain while the run goes on.
RunStats run_loop(Session& s, const CommonOptions& o,
                  const std::function<void(const bb_record&, std::span<const uint32_t>)>& on_stack,
                  const std::function<bool()>& done = {}, const std::function<void(uint64_t)>& tick = {});

// SIGINT and SIGTERM end the run: stop_requested() turns true, and a wait they interrupt ends
// at once (no SA_RESTART).
void catch_stop_signals();
bool stop_requested();

// The end of a run: the summary line, --stats, and the exit code (1 if an error stopped it).
int end_run(Session& s, const CommonOptions& o, const RunStats& st, const char* what);

}  // namespace bb
