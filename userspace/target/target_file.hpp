// The target's files, opened as the very inode one of its mappings maps: the only way any part
// of beam-bpf opens a file of the target (its executable, libc, NIF libraries).
//
// The target controls its mount namespace and every path in it. A name in /proc/PID/maps is
// only a hint: after the target unlinked a library, "<path> (deleted)" may name a FIFO (an open
// that never returns), a device, or a symlink to a host file that root would then read; paths
// under /proc/PID/root resolve absolute symlinks against the host's root. So a file is opened
//   1. as the mapping itself, /proc/PID/map_files/START-END (the vma's own file, deleted or not;
//      the kernel wants CAP_SYS_ADMIN), else by its path with openat2(RESOLVE_IN_ROOT |
//      RESOLVE_NO_MAGICLINKS) under an O_PATH descriptor of /proc/PID/root;
//   2. first with O_PATH, which runs no driver and blocks on nothing (a FIFO, a device, a FUSE
//      file), and checked with fstat: a regular file whose device and inode are the mapping's,
//      under a size cap; files on FUSE (whose server, maybe the target, could stall every read)
//      are refused before that;
//   3. then reopened through /proc/self/fd/N with O_RDONLY|O_NONBLOCK|O_NOCTTY|O_CLOEXEC
//      (O_NONBLOCK: a lease the target holds makes the open fail, not wait) and checked again.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/error.hpp"
#include "base/unique_fd.hpp"
#include "target/proc_maps.hpp"

namespace bb {

// No ELF file a VM maps comes near this (beam.smp with DWARF: about 60 MiB); a bigger one is
// refused rather than read.
inline constexpr uint64_t kMaxTargetFileBytes = 1ull << 30;

struct TargetFile {
    UniqueFd fd;        // O_RDONLY, verified; closed with the TargetFile
    uint64_t size = 0;  // st_size at the check
    dev_t dev = 0;
    ino_t inode = 0;
    std::string name;      // the mapped path as the target names it, " (deleted)" cut off
    bool deleted = false;  // the target unlinked it after mapping it

    // A path the kernel resolves to this open file and nothing else, for interfaces that take a
    // path (uprobes, libraries that open by name): /proc/self/fd/N is a link in this process's
    // own descriptor table, which the target cannot touch. Valid while `fd` is open.
    std::string fd_path() const { return "/proc/self/fd/" + std::to_string(fd.get()); }
    // Up to `len` bytes at `offset` (fewer at the end of the file, or if the target truncated
    // it since); nullopt on a read error.
    std::optional<std::vector<char>> read(uint64_t offset, size_t len) const;
};

// Opens the file mapping `m` of process `pid` maps (see above). Fail says why not, in a few
// words ("not a regular file", "replaced since it was mapped", ...).
Result<TargetFile> open_mapped_file(pid_t pid, const Mapping& m, uint64_t max_bytes = kMaxTargetFileBytes);

// The mapping of `pid` that maps the start (file offset 0) of its executable, found by the
// executable's device and inode (/proc/PID/exe), not by its name.
std::optional<Mapping> exe_mapping(pid_t pid, const std::vector<Mapping>& maps);

// Devices of the target's FUSE mounts (from /proc/PID/mountinfo, read bounded).
std::vector<dev_t> fuse_devices(pid_t pid);

}  // namespace bb
