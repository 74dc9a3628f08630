// beam-bpf-sample -e wall: the tick loop of one VM's wall profile (run/wall_profile.hpp), its
// reports and its summary.
#pragma once
#include <cstdint>

#include "run/session.hpp"

namespace bb {

// Ticks until -d, a signal or the VM's exit, `per_tick` processes read a tick; writes the
// reports. Returns the exit code.
int run_wall(Session& s, const CommonOptions& o, uint32_t per_tick);

}  // namespace bb
