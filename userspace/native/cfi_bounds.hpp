// A check of a file's .eh_frame before libdw interprets it (unwind_table.cpp).
//
// libdw sizes each frame state it computes by the largest register number the CIE and FDE
// programs name, up to 268 million registers (2 GiB), and copies the CIE's state for every
// look-up: one garbled or hostile library mapped into the VM made a single look-up allocate
// and clear gigabytes (fuzz_unwind: 25 s and an out-of-memory for a 64 KiB file). x86-64 names
// fewer than 130 DWARF registers, so a program naming more is refused before libdw runs it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <libelf.h>

namespace bb {

// Registers a CFI program of a file may name; x86-64's highest (k7) is 125. And the
// DW_CFA_remember_state one program may hold, each a copy of the frame state per look-up: gcc
// emits one per epilogue that is not the function's last.
inline constexpr unsigned kMaxCfiRegister = 255;
inline constexpr unsigned kMaxCfiRemembers = 1024;

// The size of a DW_EH_PE-encoded value of a 64-bit file, 0 for LEB128 forms and garbage.
size_t eh_encoded_size(uint8_t enc);

// The .eh_frame data libdw's dwarf_getcfi_elf() reads (the section when the file has section
// headers, else from PT_GNU_EH_FRAME's pointer to the end of the file), at every entry libdw
// may run: those of a linear walk from its start, and the FDEs at `fdes` (the addresses in the
// .eh_frame_hdr table) with their CIEs. "" if every CIE's return-address register and every
// register its CIE and FDE programs name is at most kMaxCfiRegister and no program remembers
// its state more than kMaxCfiRemembers times, else why not. A program libdw would stop
// reading (an unknown opcode, a truncated operand) is read as far as libdw reads it.
std::string cfi_out_of_bounds(Elf* elf, const std::vector<uint64_t>& fdes);

}  // namespace bb
