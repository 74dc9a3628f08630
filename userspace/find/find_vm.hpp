// Finding the VM a user means: the PID words of the command line (a beam.smp, a wrapper script
// that started one, a thread of one), or --node NAME; and the list of every VM on the host
// (beam-bpf-vms). Built on the discovery the agent uses too (target/discovery.hpp): the same /proc reads,
// bounded, and the same node and release names.
//
// /proc is read as any user may (stat, status, comm), so a mistake is named even where the
// tool will not be allowed to attach; the executable's link is read where it can be.
#pragma once
#include <sys/types.h>

#include <string>
#include <vector>

#include "target/discovery.hpp"

namespace bb {

// The one beam.smp that `targets` (the PID words) or `node` (--node) name. Prints a line on
// stderr when it resolves a thread or a wrapper to the VM; UserError, one line, for no PID,
// several, a node name that matches none or several VMs, a wrapper with several VMs under it, or
// a process that is no BEAM and started none. A pid it cannot judge is returned as given:
// Vm::attach says why it will not do.
pid_t find_vm(const std::vector<std::string>& targets, const std::string& node);

// One VM on this host, for beam-bpf-vms.
struct VmListing {
    BeamProcess process;
    VmLabels labels;
    int otp_release = 0;  // 0 when its binary has no version string (or cannot be read)
    double uptime_s = 0;
};
std::vector<VmListing> list_vms();

}  // namespace bb
