// beam-bpf-sample --pstack: one stack of each scheduler that is running a process (its Erlang
// pid, its name, every frame leaf first), then the end of the run.
#pragma once
#include <vector>

#include "run/options.hpp"
#include "run/session.hpp"
#include "target/vm.hpp"

namespace bb {

// Runs the started session `s` until every busy normal scheduler of `scheds` has been seen (at
// most -d seconds, 2 when not given: an idle scheduler is never sampled), prints the snapshot
// to the top report's stream and returns end_run()'s exit code.
int run_pstack(Session& s, const CommonOptions& o, const std::vector<SchedThread>& scheds);

}  // namespace bb
