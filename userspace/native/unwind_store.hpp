// The unwind tables of every VM a process follows, shared: a file's compiled table is kept
// once however many VMs map it, and a table's rows and buckets are stored once in the arrays
// every walker reads (bpf/maps.bpf.h), each VM's module entries pointing into them.
//
// Two keys, for two different trusts:
//   - a compiled table is found by the file's identity as the kernel gives it (FileId: device,
//     inode, size, mtime and ctime of the inode the mapping maps), never by what the file says of
//     itself: a build-id is a claim a target can forge. Two VMs that map the same inode share it;
//     whoever can change that inode already runs code in both.
//   - rows are placed by their content: a table equal row for row and bucket for bucket to one
//     already placed shares its region (the same file in two containers' own copies, whose
//     inodes differ), found by a hash and always checked whole. Equal content is the only thing
//     that makes a shared region right, so nothing can make a VM unwind with another file's rows.
//
// Regions are refcounted: when the last module entry pointing at one goes (its VM detached), the
// region is free for the next table that fits (first fit, neighbours merged), so VMs of the same
// build coming and going reuse the same space. The arrays never grow: a table that does not fit is
// refused with a reason, and its file has no native frames.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "base/error.hpp"
#include "beam_bpf.h"
#include "native/unwind_table.hpp"

namespace bb {

// First-fit placement of [start, start + n) ranges in [0, capacity); freed ranges merge with
// free neighbours.
class RangeAllocator {
public:
    explicit RangeAllocator(uint32_t capacity);
    std::optional<uint32_t> take(uint32_t n);  // nullopt: no free range holds n
    void give(uint32_t start, uint32_t n);
    uint32_t capacity() const { return capacity_; }
    uint32_t used() const { return used_; }
    size_t free_ranges() const { return free_.size(); }

private:
    uint32_t capacity_, used_ = 0;
    std::map<uint32_t, uint32_t> free_;  // start -> length, never touching
};

// A file as the kernel knows it (fstat of the mapping's own inode).
struct FileId {
    dev_t dev = 0;
    ino_t inode = 0;
    uint64_t size = 0;
    int64_t mtime_ns = 0, ctime_ns = 0;
    auto operator<=>(const FileId&) const = default;
};
// The identity of an open file; nullopt if fstat fails.
std::optional<FileId> file_id(int fd);

// Where one table's rows and buckets are in the store's arrays: module entries use first_row
// and first_bucket.
struct UnwindRegion {
    uint32_t first_row = 0, nrows = 0, first_bucket = 0, nbuckets = 0;
};

class UnwindStore : public std::enable_shared_from_this<UnwindStore> {
public:
    // Where the rows and buckets go: the kernel's arrays (sampling/unwind_maps.hpp), or memory
    // in the tests. A region is written whole before any module entry points at it.
    struct Writer {
        virtual ~Writer() = default;
        // Throws UserError when the write fails.
        virtual void write(uint32_t first_row, std::span<const bb_unwind_row> rows, uint32_t first_bucket,
                           std::span<const uint32_t> buckets) = 0;
    };
    // A placed table, held by each module entry that points at it: the region is freed when
    // the last holder lets go.
    using Share = std::shared_ptr<const UnwindRegion>;

    static std::shared_ptr<UnwindStore> create(uint32_t row_capacity, uint32_t bucket_capacity,
                                               std::shared_ptr<Writer> writer);
    UnwindStore(const UnwindStore&) = delete;
    UnwindStore& operator=(const UnwindStore&) = delete;

    // The compiled table of the file `id`, compiled by `compile` only if no holder of it is left.
    std::shared_ptr<const UnwindTable> table(const FileId& id, const std::function<UnwindTable()>& compile);
    // A region holding `t`'s rows and buckets: the one of an equal table if placed, else a new
    // one. Fail says why not, in a line ("no room for its N unwind rows: M of K in use").
    Result<Share> place(const std::shared_ptr<const UnwindTable>& t);

    struct Stats {
        uint32_t row_capacity = 0, rows_used = 0, bucket_capacity = 0, buckets_used = 0;
        size_t regions = 0;          // tables placed now
        size_t shares = 0;           // module entries pointing at them
        size_t tables = 0;           // compiled tables held now
        uint64_t compiled = 0;       // tables compiled since the start
        uint64_t table_reuses = 0;   // a file's table found compiled
        uint64_t region_reuses = 0;  // a placement that found its rows placed
        uint64_t refused = 0;        // placements refused: no room
        // The arrays' memory: the kernel stores an array's values 8 bytes apart, 4-byte buckets too.
        uint64_t kernel_bytes() const { return (uint64_t(row_capacity) + bucket_capacity) * 8; }
    };
    Stats stats() const;

private:
    UnwindStore(uint32_t row_capacity, uint32_t bucket_capacity, std::shared_ptr<Writer> writer);
    struct Placed {
        std::shared_ptr<const UnwindTable> table;  // the content, to compare a candidate with
        std::weak_ptr<const UnwindRegion> region;
    };
    void release(const UnwindRegion* r, size_t hash);

    RangeAllocator rows_, buckets_;
    std::shared_ptr<Writer> writer_;
    std::unordered_multimap<size_t, Placed> placed_;  // by content hash
    std::map<FileId, std::weak_ptr<const UnwindTable>> tables_;
    Stats counts_;
};

}  // namespace bb
