// The VM's global variables that the tools read, found in the memory of a VM whose binary has
// no symbols for them. OTP 28 and later build the emulator with -fvisibility=hidden: the
// process table, the atom table, the scheduler data arrays, the JIT's debugger descriptor and
// the literal area are local symbols, and stripping removes them. What is left to find them by
// is the binary's writable segments (where every one of them lives) and what each one holds in
// the running VM, which no other variable holds as well:
//   __jit_debug_descriptor   version 1, then a list of code entries linked both ways whose
//                            oldest entry is the emulator's symfile (kind 0), the others modules
//   erts_proc                points at a table whose slot 0 holds <0.0.0>, beside a plausible size
//   erts_atom_table          its index pages hold atoms 0 to 3 (false, true, '_', nonode@nohost)
//                            at their own indices, by their lengths
//   erts_aligned_*_scheduler_data
//                            point at arrays whose elements name themselves (type, number) and
//                            hold their own address (aux_work_data.esdp), as many as the VM has
//                            threads of that kind
//   erts_literals_start/size a range that holds the text of those atoms (28 on: literals)
// A candidate is taken only when it is the only one that fits (or all that fit agree on the
// value read through it); otherwise the global is not found, with the reason, and the caller
// refuses. Each is then checked again in use by the attach checks (target/vm_live.cpp).
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/error.hpp"
#include "target/elf_file.hpp"
#include "target/offsets.hpp"
#include "target/proc_maps.hpp"
#include "target/remote_memory.hpp"

namespace bb {

struct GlobalsScan {
    const RemoteMemory* mem = nullptr;
    std::vector<std::pair<uint64_t, uint64_t>> data;  // the binary's writable segments: [start, end) at run time
    std::vector<Mapping> maps;                        // the VM's mappings (pointers must land in one)
    const VmOffsets* o = nullptr;
    int normal = 0, dirty_cpu = 0, dirty_io = 0;  // scheduler threads, by their names
    bool atom_text_binary = false;                // OTP 28 on: atom text in the literal area
};

struct GlobalsFound {
    std::map<std::string, uint64_t, std::less<>> at;          // name -> run-time address
    std::map<std::string, std::string, std::less<>> why_not;  // name -> why it was not found
};

// The globals above that can be found, each checked in the live VM; at most 64 MiB of the
// binary's data is read.
GlobalsFound find_globals(const GlobalsScan& scan);
inline constexpr uint64_t kMaxGlobalsScanBytes = 64ull << 20;

}  // namespace bb

namespace bb {

// __jit_debug_register_code, the empty function the JIT calls after each change to its debugger
// descriptor (beam_jit_metadata.cpp sets action_flag, then calls it): where the code events'
// probe goes. Found in the code of the binary open at `fd`: every `mov dword [rip+X], 1 or 2`
// whose X is the descriptor's action_flag (at link-time `descriptor_vaddr` + 4), followed within
// 48 bytes by a direct call. The calls must all go to one function, and it must be empty (`ret`,
// or `endbr64; ret`). Its link-time address; a Fail saying why if none or they disagree.
Result<uint64_t> find_jit_register_code(int fd, const std::vector<ElfSegment>& segments, uint64_t descriptor_vaddr);

}  // namespace bb
