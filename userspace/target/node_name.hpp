// The node's name as the VM itself holds it, whatever made it distributed: -name, -sname,
// net_kernel:start/2 at run time (RabbitMQ), or nothing yet.
//
// erts_set_this_node (erl_node_tables.c, OTP 25 to 29) prints the node's atom with "%T" into
// the 256-byte erts_this_node_sysname_BUFFER each time the node is named or unnamed: at boot
// ("nonode@nohost") and whenever distribution starts or stops, as Erlang prints it, so quoted
// where the atom needs it ('rabbit@host.example'). That buffer is read, never the command line:
// the command line only says what the node will be called once distribution is up.
//
// Where it is: the binary's symbol (OTP 25 to 27 export it), else, in a binary that has none
// (OTP 28 on hide it, and stripping removes it), the one pointer in the binary's writable data,
// erts_this_node_sysname, that points at a node name in that data. The bytes are the target's:
// a name is taken only when it is one (printable ASCII, one '@', NUL-terminated in the buffer)
// and reads the same twice running (the VM may be writing it).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/error.hpp"

namespace bb {

inline constexpr size_t kNodeNameBuffer = 256;  // sizeof erts_this_node_sysname_BUFFER

// The name in a copy of the buffer: "" for "nonode@nohost" (not distributed), the atom's text
// with Erlang's quotes taken off ("rabbit@host.example"), nullopt when the bytes are no node
// name.
std::optional<std::string> parse_node_name(std::string_view buffer);

// Where `pid` keeps its node's name (the buffer's run-time address), or why it cannot be found.
Result<uint64_t> find_node_name(pid_t pid);

// The node name of VM `pid` started at `start_time` (/proc/PID/stat's), read from its memory:
// "" when it is not distributed, nullopt when it cannot be read (another user's VM, a VM still
// booting, a build that keeps it elsewhere). The buffer's address is remembered per VM, so a
// later call is one read of 256 bytes.
std::optional<std::string> node_name_in_memory(pid_t pid, uint64_t start_time);

// Whether `given` (what a user typed: "shop@vm", "'shop@vm'", "shop") names node `node`
// ("shop@vm", or a command line's "shop" for a VM not yet distributed).
bool node_matches(const std::string& node, std::string given);

}  // namespace bb
