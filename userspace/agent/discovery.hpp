// Which BEAM VMs run on this host, and what an operator calls each: found by scanning /proc,
// containers included (a VM in another pid or mount namespace is a /proc entry like any
// other; its files are read through /proc/PID/root and /proc/PID/exe).
//
// Everything here is read from processes the agent does not trust: every read is bounded,
// every text is cleaned of control bytes before it is logged or becomes a label.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace bb::agent {

// One beam.smp as /proc shows it. (pid, start_time) names it: a pid can be reused.
struct BeamProcess {
    pid_t pid = 0;
    uint64_t start_time = 0;         // clock ticks after boot (/proc/PID/stat field 22)
    std::string exe;                 // readlink /proc/PID/exe: as its own mount namespace names it
    std::vector<std::string> argv;   // /proc/PID/cmdline, at most kMaxCmdline bytes
    std::vector<std::string> env;    // RELEASE_NAME= and REL_NAME= only (release scripts set them)
    std::string cgroup;              // the cgroup v2 path ("0::" line), or the first v1 one
    pid_t ns_pid = 0;                // its pid in its own pid namespace (NSpid's last), 0 if unknown
};

inline constexpr size_t kMaxCmdline = 64 * 1024;

// Whether a readlink of /proc/PID/exe is a BEAM emulator: beam.smp, beam.lcnt.smp,
// beam.debug.smp ... (" (deleted)" after an upgrade in place counts).
bool is_beam_exe(const std::string& exe);

// Every beam.smp under `proc` ("/proc"); processes that vanish or cannot be read are left out.
std::vector<BeamProcess> find_beams(const std::string& proc = "/proc");
// One process, nullopt if it is gone or is not a BEAM.
std::optional<BeamProcess> read_beam(const std::string& proc, pid_t pid);

// What each profile of a VM is labelled with (see README, Agent).
struct VmLabels {
    std::string node;          // -name / -sname as given ("a@host", "worker"); "" when not distributed
    std::string release;       // an Elixir or rebar3 release's name; "" when none
    std::string container_id;  // 64 hex digits found in the cgroup path; "" when none
    std::string cgroup;
};
VmLabels labels_of(const BeamProcess& p);

// The node name from a beam.smp command line: the value after -name or -sname.
std::string node_name(const std::vector<std::string>& argv);
// The release name: RELEASE_NAME (mix release) or REL_NAME (rebar3/relx) from the environment,
// else the directory above "releases" in -boot's path when that is not the OTP root's own
// (-root) boot script.
std::string release_name(const std::vector<std::string>& argv, const std::vector<std::string>& env);
// A container id in a cgroup path: the last run of exactly 64 hex digits
// (docker-ID.scope, cri-containerd-ID.scope, crio-ID.scope, /docker/ID, libpod-ID).
std::string container_id(const std::string& cgroup);
// `text` with control bytes and non-ASCII bytes as '?', cut to `max` bytes: safe for a
// terminal, a log line and a label.
std::string clean(const std::string& text, size_t max = 256);

}  // namespace bb::agent
