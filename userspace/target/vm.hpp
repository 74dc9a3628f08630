// The target VM: a running beam.smp, checked before anything is attached to it.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "beam_bpf.h"
#include "base/clock.hpp"
#include "base/error.hpp"
#include "target/elf_file.hpp"
#include "target/proc_maps.hpp"
#include "target/target_file.hpp"
#include "target/offsets.hpp"
#include "target/release.hpp"
#include "target/remote_memory.hpp"
#include "target/vm_globals.hpp"

namespace bb {

struct SchedThread {
    pid_t tid = 0;
    bb_sched sched{};  // as the BPF map holds it
    std::string name;  // thread name, e.g. "1_scheduler"
};

// "scheduler 3", "dirty cpu scheduler 1" ("" for BB_SCHED_NONE).
std::string sched_name(uint8_t type, uint16_t no);

class Vm {
public:
    // Checks that `pid` is a live beam.smp of a supported release and flavor, finds its struct
    // offsets (--offsets FILE, its own DWARF, the shipped table for its release and build
    // features, else the nearest release's table corrected in the live VM) and checks them
    // against the live VM. UserError, one line, when no route works. A VM still starting is
    // waited for (wait_for_boot()), unless `wait_for_boot` is false (the agent, whose scan loop
    // serves other VMs meanwhile: it is refused with "still starting" and tried again).
    static Vm attach(pid_t pid, const std::string& offsets_file = {}, bool wait_for_boot = true);

    pid_t pid() const { return pid_; }
    const std::string& exe() const { return exe_; }
    std::string exe_name() const { return exe_.substr(exe_.rfind('/') + 1); }  // "beam.smp"
    const ElfFile& elf() const { return *elf_; }
    // The executable, opened as its mapping maps it (target/target_file.hpp), for the life of
    // the Vm: for reading and for uprobes (by its fd_path()).
    const TargetFile& exe_file() const { return *exe_file_; }
    const VmOffsets& offsets() const { return offsets_; }
    const VmBuild& build() const { return build_; }
    const OtpRelease& release() const { return *release_; }
    // A warning for the attach line ("" when none): an untested release, or offsets found live.
    const std::string& caveat() const { return caveat_; }
    const RemoteMemory& mem() const { return mem_; }
    uint64_t load_bias() const { return load_bias_; }
    // Runtime address of a beam.smp global: its symbol (the binary's, or its debug file's), else
    // where it was found in the VM's memory (target/vm_globals.hpp); UserError if neither.
    uint64_t symbol_address(const std::string& name) const;
    // Where the binary's missing symbols came from, for the attach line: "" when it has them
    // all, "debug file PATH (SOURCE)", or "VM's memory" (target/vm_globals.hpp).
    const std::string& symbols_origin() const { return symbols_origin_; }
    // No symbols for the VM's local functions either (blame and -e alloc probe those): why, and
    // what would give them; "" when the binary or its debug file has them.
    std::string missing_local_symbols() const;

    // How long each step of attach() took ("executable", "globals search", "live checks", ...).
    const StageTimes& attach_times() const { return times_; }

    // Whether the VM still runs: one exiting (PF_EXITING) or a zombie not yet reaped does not.
    bool alive() const;
    // Executable mappings of JIT code (/memfd:vmem, or anonymous with +JPperf), merged when
    // adjacent, at most BB_MAX_CODE_RANGES.
    std::vector<bb_range> jit_code_ranges() const;
    // The VM's threads (/proc/PID/task) with their names, e.g. "erts_sched_1".
    struct Thread {
        pid_t tid = 0;
        std::string name;
        uint64_t start_time = 0;  // since boot, in clock ticks (/proc/PID/task/TID/stat)
    };
    std::vector<Thread> threads() const;
    // Scheduler threads, from thread names; esdp from the scheduler data arrays.
    std::vector<SchedThread> sched_threads() const;
    // The mapping of each file's offset 0 (the executable, then libraries: libc, NIFs), one per
    // file by device and inode; open them with open_mapped_file().
    std::vector<Mapping> mapped_files() const;
    // "" when `o` describes the live VM (the process table, <0.0.0>, heap <= htop <= stop <=
    // hend of many processes, scheduler data that names itself), else why not.
    std::string layout_mismatch(const VmOffsets& o) const;
    // Waits, at most 10 s, while the VM has not made its first process yet (its process table
    // or its slot 0, init, still empty): a VM caught in its first moments, not a table that does
    // not fit it. Says so on stderr once the wait passes a quarter of a second. Without the wait
    // (attach's `wait_for_boot` false), a VM still starting is a UserError.
    void wait_for_boot(const VmOffsets& o) const;
    // Corrects, from the live VM, what build options move: where the process table's read-only
    // part sits in erts_proc, the scheduler data fields and the stride of their arrays. True if
    // it changed o. Attach uses it only on values that were not read for this very build.
    bool correct_layout(VmOffsets& o) const;

    // "<0.85.0>" for an internal pid term, as this VM prints it; and back (nullopt: not a pid).
    std::string format_pid(uint64_t pid_term) const { return release_->pids.format(pid_term, pix_); }
    std::optional<uint64_t> parse_pid(std::string_view text) const { return release_->pids.parse(text, pix_); }
    // The process-table slot a local pid term's process sits in (erts_ptab_id2pix): the high
    // half of the term up to 25, its pixdata's low bits from 26. A slot may hold another
    // process by now: the caller checks the pid its Process holds.
    uint64_t process_slot(uint64_t pid_term) const {
        return release_->pids.pixdata ? (pid_term >> 4) & pix_.mask : pid_term >> 32;
    }

    // Whether the VM's binary (or its debug file) names the function `name`.
    bool has_symbol(const std::string& name) const;

private:
    Vm(pid_t pid) : pid_(pid), mem_(pid) {}
    void identify();
    void choose_offsets(const std::string& offsets_file);
    bool lacks_local_symbols() const;
    void find_debug_symbols();
    void find_globals(const VmOffsets& o);
    std::vector<SchedThread> sched_threads(const VmOffsets& o) const;
    bool esd_names_itself(uint64_t esdp, uint64_t no, uint8_t type, const VmOffsets& o) const;
    struct RunningSeen {
        uint64_t esdp;                // the normal scheduler it runs on
        std::vector<std::byte> proc;  // its Process, proc_size + 64 bytes
    };
    std::vector<RunningSeen> running_processes(const VmOffsets& o, size_t want) const;

    pid_t pid_;
    StageTimes times_;
    RemoteMemory mem_;
    std::string exe_;
    bool wait_boot_ = true;
    std::shared_ptr<const TargetFile> exe_file_;
    std::optional<ElfFile> elf_;
    uint64_t load_bias_ = 0;
    VmOffsets offsets_;
    VmBuild build_;
    const OtpRelease* release_ = nullptr;
    std::string caveat_;
    std::string symbols_origin_;
    std::string debug_tried_;  // where a debug file was looked for, when none was found
    GlobalsFound globals_;     // found in memory, for a binary without their symbols
    PidLayout::Pix pix_;       // the process table's index permutation (OTP 26 on)
};

}  // namespace bb
