// beam-bpf-sample -e wall: the tick loop. Each tick's processes (sampling/wall_sampler.hpp) are
// named as the walker's records are (the same symbolizer, the same frames), under a root frame
// of their state ("[waiting]", "[runnable]", ...), weighed in nanoseconds of process time.
#pragma once
#include <cstdint>
#include <string>

#include "run/session.hpp"

namespace bb {

// The frame under a waiting process's leaf: "[receive, queue 0]", with its message queue's
// length bucketed by powers of ten ("1-9", "10-99", ...): few distinct frames, and the order of
// magnitude is what tells a mailbox no one drains.
std::string receive_frame(int64_t queue_len);

// Ticks until -d, a signal or the VM's exit, `per_tick` processes read a tick; writes the
// reports. Returns the exit code.
int run_wall(Session& s, const CommonOptions& o, uint32_t per_tick);

}  // namespace bb
