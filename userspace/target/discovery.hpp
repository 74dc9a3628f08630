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
#include <string_view>
#include <vector>

namespace bb {

// One beam.smp as /proc shows it. (pid, start_time) names it: a pid can be reused.
struct BeamProcess {
    pid_t pid = 0;
    uint64_t start_time = 0;        // clock ticks after boot (/proc/PID/stat field 22)
    std::string exe;                // readlink /proc/PID/exe: as its own mount namespace names it
    std::vector<std::string> argv;  // /proc/PID/cmdline, at most kMaxCmdline bytes
    // KEY=VALUE of the keys kEnvKeys only: what names the VM (release scripts set RELEASE_NAME or
    // REL_NAME; a Kubernetes pod spec may set POD_NAME and POD_NAMESPACE by the Downward API).
    std::vector<std::string> env;
    std::string cgroup;  // the cgroup v2 path ("0::" line), or the first v1 one
    pid_t ns_pid = 0;    // its pid in its own pid namespace (NSpid's last), 0 if unknown
    // Its node's name as its memory holds it (target/node_name.hpp): "" when not distributed,
    // nullopt when not read (another user's VM, one still booting, a /proc other than the host's).
    std::optional<std::string> node_in_memory;
};

inline constexpr size_t kMaxCmdline = 64 * 1024;
// /proc/PID/environ is read up to this: a key set after it is not seen.
inline constexpr size_t kMaxEnviron = 64 * 1024;
inline constexpr const char* kEnvKeys[] = {"RELEASE_NAME=", "REL_NAME=", "POD_NAME=", "POD_NAMESPACE="};

// The /proc texts of one process as read, each bounded (read_beam's caps): what parse_beam takes.
struct ProcTexts {
    std::string exe;  // readlink of /proc/PID/exe
    std::string stat, cmdline, environ, cgroup, status;
};

// Up to `max` bytes of a /proc file ("" if it cannot be opened: gone, or not ours).
std::string read_bounded(const std::string& path, size_t max);

// Whether a readlink of /proc/PID/exe is a BEAM emulator: beam.smp, beam.lcnt.smp,
// beam.debug.smp ... (" (deleted)" after an upgrade in place counts).
bool is_beam_exe(const std::string& exe);

// Every beam.smp under `proc` ("/proc"); processes that vanish or cannot be read are left out.
std::vector<BeamProcess> find_beams(const std::string& proc = "/proc");
// One process, nullopt if it is gone or is not a BEAM. Under "/proc", its node's name is read
// from its memory too.
std::optional<BeamProcess> read_beam(const std::string& proc, pid_t pid);
// The parsing half of read_beam, on texts as they were read (any bytes): nullopt if they are not
// a BEAM's (not its executable, no start time).
std::optional<BeamProcess> parse_beam(pid_t pid, const ProcTexts& t);

// What each profile of a VM is labelled with (see docs/agent.md, Labels).
struct VmLabels {
    // The node's name as node() gives it ("a@host"), read from the VM's memory; for a VM not
    // distributed yet (or not readable), what -name / -sname says it will be ("a@host", "worker");
    // "" when neither names it.
    std::string node;
    bool node_from_command_line = false;  // `node` is the command line's, not yet the VM's
    std::string release;                  // an Elixir or rebar3 release's name; "" when none
    std::string container_id;             // 64 hex digits found in the cgroup path; "" when none
    std::string cgroup;
    std::string pod_uid;                  // a Kubernetes pod's uid from the cgroup path (kubelet's); "" when none
    std::string pod_name, pod_namespace;  // POD_NAME, POD_NAMESPACE in its environment; "" when unset
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
// A Kubernetes pod's uid in a cgroup path the kubelet made, with dashes: the systemd driver's
// /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid with _>.slice/... and
// cgroupfs' /kubepods/burstable/pod<uid>/...; "" when the path is no pod's.
std::string pod_uid(const std::string& cgroup);
// The value of KEY in env's KEY=VALUE entries ("" when unset); `key` ends with '='.
std::string env_value(const std::vector<std::string>& env, std::string_view key);
// `text` with control bytes and non-ASCII bytes as '?', cut to `max` bytes: safe for a
// terminal, a log line and a label.
std::string clean(const std::string& text, size_t max = 256);

}  // namespace bb
