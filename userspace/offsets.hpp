// Struct offsets of the VM build being profiled: everything the BPF walker and the attach
// checks need to know about the VM's C structs. They come from DWARF (the VM's own, or a
// -g build of the same source), and are shipped as tables keyed by build-id (offsets/*.txt).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace bb {

struct VmOffsets {
    std::string build_id;  // of the stripped binary this table is for
    std::string origin;    // where the values came from, for messages ("DWARF of /path", "table X")

    // struct process (Process)
    uint32_t proc_id = 0;             // common.id
    uint32_t proc_htop = 0;
    uint32_t proc_stop = 0;
    uint32_t proc_frame_pointer = 0;
    uint32_t proc_heap = 0;
    uint32_t proc_hend = 0;
    uint32_t proc_i = 0;
    uint32_t proc_current = 0;
    uint32_t proc_size = 0;           // sizeof(Process)
    // ErtsSchedulerData
    uint32_t esd_registers = 0;
    uint32_t esd_no = 0;
    uint32_t esd_type = 0;
    uint32_t esd_current_process = 0;
    uint32_t aligned_esd_size = 0;    // sizeof(ErtsAlignedSchedulerData): array stride
    // ErtsSchedulerRegisters
    uint32_t regs_runtime_stack = 0;  // aux_regs.d.runtime_stack
    // ErtsPTab (erts_proc)
    uint32_t ptab_tab = 0;            // r.o.tab
    uint32_t ptab_max = 0;            // r.o.max

    bool operator==(const VmOffsets&) const = default;
};

// Reads the offsets from the DWARF of `elf_path` (a beam.smp with debug info, or its separate
// debug file). nullopt and a one-line reason in *err when a struct or member is missing.
std::optional<VmOffsets> offsets_from_dwarf(const std::string& elf_path, std::string* err);

// The table format: '#' comments, then "key value" lines (build_id first). Parsing is strict:
// unknown keys, missing keys, duplicates and bad numbers are errors.
std::string format_table(const VmOffsets& o);
std::optional<VmOffsets> parse_table(std::string_view text, std::string* err);

// The tables compiled into the tools from offsets/*.txt.
std::optional<VmOffsets> builtin_offsets(std::string_view build_id);

}  // namespace bb
