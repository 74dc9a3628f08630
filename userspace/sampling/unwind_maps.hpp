// The kernel's copy of an UnwindStore (native/unwind_store.hpp): the two arrays of unwind rows
// and buckets that every walker of this process reuses (bpf_map__reuse_fd) instead of its own,
// so VMs of one build hold their rows once.
#pragma once
#include <cstdint>
#include <memory>

#include "base/unique_fd.hpp"
#include "native/unwind_store.hpp"

namespace bb {

class UnwindMaps final : public UnwindStore::Writer {
public:
    // Creates both arrays, preallocated (an ARRAY map's memory is the kernel's from the start).
    // Throws UserError with a one-line reason.
    UnwindMaps(uint32_t rows, uint32_t buckets);
    void write(uint32_t first_row, std::span<const bb_unwind_row> rows, uint32_t first_bucket,
               std::span<const uint32_t> buckets) override;
    int rows_fd() const { return rows_.get(); }
    int buckets_fd() const { return buckets_.get(); }

private:
    UniqueFd rows_, buckets_;
};

// A store whose rows are in the kernel, and the maps the walkers reuse.
struct SharedUnwind {
    std::shared_ptr<UnwindMaps> maps;
    std::shared_ptr<UnwindStore> store;
    // Room for `rows` rows and a quarter as many buckets: a bucket covers 256 bytes of code,
    // which holds about 6 rows in real files (Debian's OTP 25 VM maps 136,202 rows and 23,329
    // buckets). A file that needs more buckets than are left is refused, as one of too many rows.
    static SharedUnwind create(uint32_t rows);
};

}  // namespace bb
