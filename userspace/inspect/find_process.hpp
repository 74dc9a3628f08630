// The Erlang process a user names on the command line (--process, --inspect): a pid as the VM
// prints it (<0.85.0>) or a registered name. One lookup for every tool.
#pragma once
#include <cstdint>
#include <string>

#include "inspect/processes.hpp"
#include "target/vm.hpp"

namespace bb {

// The pid term `text` names, masked as the records and the process table compare it
// (PidLayout::mask()). `flag` starts the UserError when none is found ("--process").
uint64_t find_process(const Vm& vm, ProcessNames& names, const std::string& text, const std::string& flag);

}  // namespace bb
