// Struct offsets of the VM build being profiled: everything the BPF walker and the attach
// checks need to know about the VM's C structs (the field list is include/bb_vm_fields.h).
// They come from DWARF (the VM's own, or a -g build of the same release: offsets_dwarf.hpp),
// shipped as tables per OTP release and layout-changing build features (offsets/*.txt), or found
// in the live VM.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "beam_bpf.h"

namespace bb {

struct VmOffsets {
    std::string otp_release;  // "27"
    std::string features;     // layout-changing build features ("lock-counting"), "" for none
    std::string build_id;     // of the binary the values were read for; "" when none was named
    std::string origin;       // where the values came from, for messages

#define BB_OFFSETS_MEMBER(field, type, member) uint32_t field = 0;
    BB_VM_FIELDS(BB_OFFSETS_MEMBER)
#undef BB_OFFSETS_MEMBER

    bb_vm_layout layout() const;  // what the BPF walker gets
    bool same_values(const VmOffsets& o) const { return layout_equal(layout(), o.layout()); }
    bool operator==(const VmOffsets&) const = default;

private:
    static bool layout_equal(const bb_vm_layout& a, const bb_vm_layout& b);
};

// The table format: '#' comments, then "key value" lines: otp_release, features ("-" for none),
// an optional build_id, then every field. Parsing is strict: unknown keys, missing keys,
// duplicates and bad numbers are errors.
std::string format_table(const VmOffsets& o);
Result<VmOffsets> parse_table(std::string_view text);

// The tables compiled into the tools from offsets/*.txt, each parsed; a table that does not
// parse is left out (the unit tests check every shipped one).
const std::vector<VmOffsets>& builtin_tables();
// The built-in table for exactly this build (by build-id), else for its release and features.
std::optional<VmOffsets> builtin_offsets(std::string_view otp_release, std::string_view features,
                                         std::string_view build_id);

}  // namespace bb
