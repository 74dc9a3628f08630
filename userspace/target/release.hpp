// Which VM a beam.smp is, read from the binary itself, and what beam-bpf knows of each OTP
// release: everything release-specific is decided here, from these two, and nowhere else.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace bb {

// What a beam.smp says of itself: its system version string, the format of what
// erlang:system_info(system_version) prints, which every release keeps as one literal in its
// data ("Erlang/OTP 27%s [erts-15.2.7] [source] [64-bit] ... [jit:ns%s] [lock-counting]").
// It survives stripping: it is data, not a symbol.
struct VmBuild {
    int otp_release = 0;        // 27
    std::string erts_version;   // "15.2.7"
    std::string flavor;         // "jit" or "emu" (no [jit] tag: the interpreter)
    bool native_stack = false;  // [jit:ns]: the Erlang stack is the native stack (E = rsp)
    bool bits64 = false;        // [64-bit]
    // Tags that change struct layouts ([lock-counting], [dtrace], [debug-compiled], ...), sorted,
    // comma-separated; "" for a plain build. Offset tables are keyed by release and this.
    std::string features;
    std::string version_string;  // as found, for messages

    std::string describe() const;  // "OTP 27 (erts-15.2.7, jit, lock-counting)"
};

// Finds and parses the system version string in the bytes of a beam.smp. nullopt when there is
// none (not a BEAM, or older than any release that has the format).
std::optional<VmBuild> read_vm_build(std::span<const char> elf_bytes);
// The same for an open file, read in 1 MiB chunks (never more at once), at most `max_bytes` of
// it: the string is in .rodata, a few MiB into beam.smp. nullopt also on a read error.
std::optional<VmBuild> read_vm_build_fd(int fd, uint64_t max_bytes);
inline constexpr uint64_t kMaxVersionScanBytes = 256ull << 20;
// The same for the file at `path` (nullopt also when it cannot be read).
std::optional<VmBuild> read_vm_build_file(const std::string& path);

// How a release names its scheduler threads: prefix, number, suffix; the kernel cuts thread
// names to 15 characters, so the suffix may be cut ("1_dirty_cpu_sch").
struct ThreadNaming {
    std::string_view prefix, suffix;
    // The scheduler number in `name`, 0 when it is not this kind of thread.
    int number(std::string_view name) const;
};

// How an internal pid term holds <0.Number.Serial>: above the 4-bit tag 0011, `data_bits` of
// data whose low `num_bits` are the number (25: 28 and 15; 26 on: 60 and 28). From OTP 26 the
// term holds the data with its low bits permuted into the process-table index ("pixdata"),
// by masks and shifts the VM chooses at start (erts_proc.r.o.pix_*): Vm reads them.
struct PidPix {  // erts_proc.r.o: pix_mask, pix_cl_mask, pix_cl_shift, pix_cli_mask, pix_cli_shift
    uint64_t mask = 0, cl_mask = 0, cli_mask = 0;
    uint32_t cl_shift = 0, cli_shift = 0;
};

struct PidLayout {
    int data_bits, num_bits;
    bool pixdata;  // 26 on: the term holds pixdata, not data

    using Pix = PidPix;
    std::string format(uint64_t term, const Pix& pix = Pix()) const;                // "<0.85.0>"
    std::optional<uint64_t> parse(std::string_view, const Pix& pix = Pix()) const;  // the term
    // The bits of a term that name the process (on OTP 25 the high half holds the table index).
    uint64_t mask() const { return data_bits >= 60 ? ~0ull : ((1ull << (data_bits + 4)) - 1); }
};

// Where an Atom entry keeps its text (atom.h): `len` bytes at its `name` pointer (up to 27), or
// in the binary term `u.bin`, the same word, from 28: a literal made by atom_alloc() in atom.c,
// an ErlHeapBits up to 64 bytes, an ErlSubBits of an off-heap Binary above (29.1.1's source;
// 28's as the OpenTelemetry profiler and etp-commands of 28.0.2 read it).
enum class AtomText { bytes, binary };

enum class Support {
    Tested,     // built and tested here: offsets from DWARF of the release's own source
    Described,  // written from the release's sources, not run here: profiled if the live checks pass
};

// How a release lays out terms in memory (erl_term.h, erl_bits.h, erl_fun.h of its source):
// what the term printer (inspect/terms.hpp) follows instead of asking which release it is.
struct TermLayout {
    // Header subtags (hdr & 0x3c) of the kinds that were renumbered: heap binary/bits,
    // off-heap binary (ProcBin up to 26, BinRef from 27), sub-binary/bits, map.
    uint64_t heap_bin, refc_bin, sub_bin, map;
    enum class Bits {
        ProcBin,  // 25, 26: heap binaries sized in bytes, ProcBin on the heap, ErlSubBin
        BinRef,   // 27 on: one bitstring type: ErlHeapBits sized in bits, ErlSubBits, BinRef
    } bits;
    // Where an off-heap binary's node (ProcBin: thing, size, next, val, ...; BinRef: thing, val,
    // next) keeps its Binary *, in bytes.
    uint32_t refc_val;
    // The header subtag of a native record (EEP 79, OTP 29: erl_record.h), kNoRecords before.
    static constexpr uint64_t kNoRecords = ~0ull;
    uint64_t record;
    bool bits_unified() const { return bits == Bits::BinRef; }
};
inline constexpr TermLayout kTerms25{.heap_bin = 0x24,
                                     .refc_bin = 0x20,
                                     .sub_bin = 0x28,
                                     .map = 0x3c,
                                     .bits = TermLayout::Bits::ProcBin,
                                     .refc_val = 24,
                                     .record = TermLayout::kNoRecords};
inline constexpr TermLayout kTerms27{.heap_bin = 0x20,
                                     .refc_bin = 0x28,
                                     .sub_bin = 0x24,
                                     .map = 0x2c,
                                     .bits = TermLayout::Bits::BinRef,
                                     .refc_val = 8,
                                     .record = TermLayout::kNoRecords};
// 29: 27's layout, and native records.
inline constexpr TermLayout kTerms29 = [] {
    TermLayout t = kTerms27;
    t.record = 0x1c;
    return t;
}();

// Everything release-specific beam-bpf relies on. The JIT's debugger interface
// (__jit_debug_descriptor and its symfiles, jit_code.hpp and jit_symfile.hpp) has one layout
// from OTP 24 to 29, and JIT code is found the same way in all of them (executable mappings of
// /memfd:vmem, or anonymous ones with +JMsingle/+JPperf), so neither needs a field here yet.
struct OtpRelease {
    int major;
    Support support;
    // Normal, dirty CPU and dirty IO schedulers (OTP 26 renamed them all).
    ThreadNaming normal, dirty_cpu, dirty_io;
    PidLayout pids;
    AtomText atom_text;
    TermLayout terms;
    // The JIT unregisters purged modules from the GDB JIT interface (27 and later); before, it
    // only ever adds entries.
    bool jit_unregisters;
    // The shipped offsets table to start from when none is for this release and build: its
    // values are checked, and where they do not fit found, in the live VM (Vm::correct_layout, target/vm.hpp).
    int layout_from;
    // Every way into the VM's garbage_collect(), which -e alloc probes; the first is the one
    // every build must have.
    std::span<const std::string_view> gc_entry_points;
};

// The description of `major`, nullptr when beam-bpf does not support it.
const OtpRelease* find_release(int major);
std::span<const OtpRelease> known_releases();
// "OTP 25 to 29": the range of known_releases(), for messages.
std::string supported_range();

}  // namespace bb
