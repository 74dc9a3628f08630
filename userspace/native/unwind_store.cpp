#include "native/unwind_store.hpp"

#include <sys/stat.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string_view>

namespace bb {

RangeAllocator::RangeAllocator(uint32_t capacity) : capacity_(capacity) {
    if (capacity) free_.emplace(0, capacity);
}

std::optional<uint32_t> RangeAllocator::take(uint32_t n) {
    if (n == 0) return std::nullopt;
    for (auto it = free_.begin(); it != free_.end(); ++it) {
        auto [start, len] = *it;
        if (len < n) continue;
        free_.erase(it);
        if (len > n) free_.emplace(start + n, len - n);
        used_ += n;
        return start;
    }
    return std::nullopt;
}

void RangeAllocator::give(uint32_t start, uint32_t n) {
    if (n == 0) return;
    used_ -= n;
    auto next = free_.lower_bound(start);
    if (next != free_.end() && start + n == next->first) {  // merge with the range after
        n += next->second;
        next = free_.erase(next);
    }
    if (next != free_.begin()) {  // ... and the one before
        auto prev = std::prev(next);
        if (prev->first + prev->second == start) {
            prev->second += n;
            return;
        }
    }
    free_.emplace(start, n);
}

std::optional<FileId> file_id(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0) return std::nullopt;
    return FileId{st.st_dev, st.st_ino, static_cast<uint64_t>(st.st_size),
                  st.st_mtim.tv_sec * 1'000'000'000ll + st.st_mtim.tv_nsec,
                  st.st_ctim.tv_sec * 1'000'000'000ll + st.st_ctim.tv_nsec};
}

namespace {

// What the walker reads of a table, as bytes: rows, then buckets.
size_t content_hash(const UnwindTable& t) {
    auto bytes = [](const auto& v) {
        return std::string_view(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(v[0]));
    };
    size_t h = std::hash<std::string_view>{}(bytes(t.rows));
    return h ^ (std::hash<std::string_view>{}(bytes(t.buckets)) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2));
}

bool same_content(const UnwindTable& a, const UnwindTable& b) {
    return a.rows.size() == b.rows.size() && a.buckets.size() == b.buckets.size() &&
           std::memcmp(a.rows.data(), b.rows.data(), a.rows.size() * sizeof(bb_unwind_row)) == 0 &&
           std::equal(a.buckets.begin(), a.buckets.end(), b.buckets.begin());
}

}  // namespace

std::shared_ptr<UnwindStore> UnwindStore::create(uint32_t row_capacity, uint32_t bucket_capacity,
                                                 std::shared_ptr<Writer> writer) {
    return std::shared_ptr<UnwindStore>(new UnwindStore(row_capacity, bucket_capacity, std::move(writer)));
}

UnwindStore::UnwindStore(uint32_t row_capacity, uint32_t bucket_capacity, std::shared_ptr<Writer> writer)
    : rows_(row_capacity), buckets_(bucket_capacity), writer_(std::move(writer)) {
    counts_.row_capacity = row_capacity;
    counts_.bucket_capacity = bucket_capacity;
}

std::shared_ptr<const UnwindTable> UnwindStore::table(const FileId& id, const std::function<UnwindTable()>& compile) {
    // Tables no VM holds any more are forgotten here, so the index stays as small as what is used.
    std::erase_if(tables_, [](const auto& kv) { return kv.second.expired(); });
    if (auto held = tables_[id].lock()) {
        counts_.table_reuses++;
        return held;
    }
    auto t = std::make_shared<const UnwindTable>(compile());
    counts_.compiled++;
    tables_[id] = t;
    return t;
}

Result<UnwindStore::Share> UnwindStore::place(const std::shared_ptr<const UnwindTable>& t) {
    const size_t hash = content_hash(*t);
    auto [lo, hi] = placed_.equal_range(hash);
    for (auto it = lo; it != hi; ++it)
        if (auto region = it->second.region.lock(); region && same_content(*it->second.table, *t)) {
            counts_.region_reuses++;
            return Share(region);
        }
    const auto nrows = static_cast<uint32_t>(t->rows.size()), nbuckets = static_cast<uint32_t>(t->buckets.size());
    if (t->rows.size() > UINT32_MAX || t->buckets.size() > UINT32_MAX) return Fail{"a table too big to place"};
    auto first_row = rows_.take(nrows);
    auto first_bucket = first_row ? buckets_.take(nbuckets) : std::nullopt;
    if (!first_row || !first_bucket) {
        if (first_row) rows_.give(*first_row, nrows);
        counts_.refused++;
        return Fail{
            fmt::format("no room for its {} unwind rows and {} buckets ({} of {} rows and {} of {} buckets in use)",
                        nrows, nbuckets, rows_.used(), rows_.capacity(), buckets_.used(), buckets_.capacity())};
    }
    try {
        writer_->write(*first_row, t->rows, *first_bucket, t->buckets);
    } catch (...) {
        rows_.give(*first_row, nrows);
        buckets_.give(*first_bucket, nbuckets);
        throw;
    }
    // The last holder's release gives the region back. The deleter holds the store: a VM's
    // tables may outlive whoever created the store.
    auto self = shared_from_this();
    Share region(new UnwindRegion{*first_row, nrows, *first_bucket, nbuckets}, [self, hash](const UnwindRegion* r) {
        self->release(r, hash);
        delete r;
    });
    placed_.emplace(hash, Placed{t, region});
    return region;
}

void UnwindStore::release(const UnwindRegion* r, size_t hash) {
    rows_.give(r->first_row, r->nrows);
    buckets_.give(r->first_bucket, r->nbuckets);
    // The entry whose region this was (expired now: its last holder is going).
    auto [lo, hi] = placed_.equal_range(hash);
    for (auto it = lo; it != hi; ++it)
        if (it->second.region.expired()) {
            placed_.erase(it);
            return;
        }
}

UnwindStore::Stats UnwindStore::stats() const {
    Stats s = counts_;
    s.rows_used = rows_.used();
    s.buckets_used = buckets_.used();
    s.regions = placed_.size();
    for (const auto& [h, p] : placed_) s.shares += static_cast<size_t>(p.region.use_count());
    for (const auto& [id, t] : tables_) s.tables += !t.expired();
    return s;
}

}  // namespace bb
