// Native unwinding, user-space half: each executable file's .eh_frame compiled into the rows
// the BPF walker unwinds with (bb_unwind_row in beam_bpf.h), and the set of them for one process,
// kept current as it maps NIF libraries. The rows also give every native function's start, which
// names functions a stripped binary has no symbol for.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "beam_bpf.h"

namespace bb {

struct UnwindTable {
    std::vector<bb_unwind_row> rows;  // sorted by pc, equal neighbours merged
    // For each BB_UNWIND_BUCKET bytes from rows[0].pc: the index of the last row at or below
    // the bucket's start (bb_unwind_module).
    std::vector<uint32_t> buckets;
    // Each FDE's [start, end), link-time, sorted by start.
    std::vector<std::pair<uint64_t, uint64_t>> functions;
    size_t bad_rows = 0;  // ranges whose rules the walker cannot follow (BB_CFA_BAD)
    std::string error;    // why there are no rows (no .eh_frame_hdr, ...), "" otherwise
    std::string budget;   // "" unless a budget of a file was spent: the rows cover only part of it
    struct Segment {
        uint64_t offset, filesz, vaddr;
    };
    std::vector<Segment> exec_segments;  // executable PT_LOADs: a mapping's load bias
    // [start, end) of the FDE that covers link-time `pc`.
    std::optional<std::pair<uint64_t, uint64_t>> function_at(uint64_t pc) const;
};

// Compiles the .eh_frame of the ELF image `bytes` (a whole file). Never throws on bad input: what
// cannot be read ends up in `error`, bad_rows or as BB_CFA_NONE rows.
UnwindTable compile_unwind_table(const void* bytes, size_t size);
// The same from a file (read with pread, never mapped); `error` says so when it cannot be read.
UnwindTable compile_unwind_table(int fd);
// A file of this host by its path (tests, tools): a target's files come through
// open_mapped_file() (target/target_file.hpp) only.
UnwindTable compile_unwind_table(const std::string& path);

class UnwindStore;
struct UnwindRegion;

// The unwind tables of every executable file a process maps, placed in the store the walkers
// read (native/unwind_store.hpp): modules only ever appended, each one's rows in the store
// before it is listed, so the walker can read them while more are added.
class NativeUnwind {
public:
    // Compiles (or finds compiled in `store`) the tables of what `pid` maps now.
    // Each file is read once however it is mapped (by device and inode), at most kMaxFiles of
    // them and kMaxRowsCompiled rows in all: the target decides how many files it maps.
    static constexpr size_t kMaxFiles = 2 * BB_MAX_UNWIND_MODULES;
    static constexpr size_t kMaxRowsCompiled = 8u << 20;
    NativeUnwind(pid_t pid, std::shared_ptr<UnwindStore> store);
    ~NativeUnwind();
    NativeUnwind(const NativeUnwind&) = delete;
    NativeUnwind& operator=(const NativeUnwind&) = delete;
    // Re-reads the process's mappings; compiles the files mapped since (NIF and driver
    // libraries). Returns how many modules were added.
    size_t refresh();
    const std::vector<bb_unwind_module>& modules() const { return modules_; }
    // Rows and buckets of this VM's files (each placed table counted once), and the bytes of
    // those and of its module entries.
    size_t rows() const { return rows_; }
    uint64_t table_bytes() const {
        return rows_ * sizeof(bb_unwind_row) + buckets_ * sizeof(uint32_t) + modules_.size() * sizeof(bb_unwind_module);
    }
    // Files skipped, each with why ("libfoo.so: no .eh_frame_hdr", "too many rows"); one line
    // for a budget of the run spent.
    const std::vector<std::string>& skipped() const { return skipped_; }

    // The native function at runtime address `addr` by its FDE: the mapped file's path and the
    // function's link-time start. For naming what has no symbol.
    struct Function {
        std::string path;
        uint64_t start = 0, end = 0;  // link-time
        uint64_t bias = 0;            // runtime minus link-time address
    };
    std::optional<Function> function_at(uint64_t addr) const;

private:
    pid_t pid_;
    std::shared_ptr<UnwindStore> store_;
    std::vector<bb_unwind_module> modules_;
    size_t rows_ = 0, buckets_ = 0;
    std::vector<std::string> skipped_;
    // Per module (same index): its file, table and the region of the store it points at.
    std::vector<std::string> paths_;
    std::vector<std::shared_ptr<const UnwindTable>> module_tables_;
    std::vector<std::shared_ptr<const UnwindRegion>> module_regions_;
    // This VM's files by device and inode (as its mappings name them): a table, or none when the
    // file could not be used.
    std::map<std::pair<dev_t, ino_t>, std::shared_ptr<const UnwindTable>> tables_;
    std::set<const UnwindRegion*> placed_;  // regions this VM points at, each counted once in rows_
    size_t rows_compiled_ = 0;
    bool budget_spent_ = false;
    void budget_spent(const std::string& why);
};

}  // namespace bb
