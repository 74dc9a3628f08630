// The shared store of unwind tables (native/unwind_store.hpp): placement, sharing by content,
// release and reuse of regions, a full store; written to memory in place of the kernel's maps.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <vector>

#include "native/unwind_store.hpp"

namespace bb {
namespace {

// The arrays as the walker would read them.
struct MemoryWriter : UnwindStore::Writer {
    std::vector<bb_unwind_row> rows;
    std::vector<uint32_t> buckets;
    size_t writes = 0;
    MemoryWriter(size_t r, size_t b) : rows(r), buckets(b) {}
    void write(uint32_t first_row, std::span<const bb_unwind_row> r, uint32_t first_bucket,
               std::span<const uint32_t> b) override {
        std::copy(r.begin(), r.end(), rows.begin() + first_row);
        std::copy(b.begin(), b.end(), buckets.begin() + first_bucket);
        writes++;
    }
};

// A table of `n` rows whose rules depend on `seed`, and n / 4 + 1 buckets.
std::shared_ptr<const UnwindTable> table(uint32_t n, uint16_t seed) {
    auto t = std::make_shared<UnwindTable>();
    for (uint32_t i = 0; i < n; i++)
        t->rows.push_back({0x1000 + 16 * i, BB_CFA_RSP, 0, static_cast<uint16_t>(seed + i)});
    for (uint32_t i = 0; i <= n / 4; i++) t->buckets.push_back(4 * i);
    return t;
}

struct Store {
    std::shared_ptr<MemoryWriter> mem;
    std::shared_ptr<UnwindStore> store;
    Store(uint32_t rows, uint32_t buckets)
        : mem(std::make_shared<MemoryWriter>(rows, buckets)), store(UnwindStore::create(rows, buckets, mem)) {}
    // The rows region `r` points at, as the walker reads them.
    std::vector<bb_unwind_row> rows_of(const UnwindRegion& r) const {
        return {mem->rows.begin() + r.first_row, mem->rows.begin() + r.first_row + r.nrows};
    }
};

bool same(const std::vector<bb_unwind_row>& a, const std::vector<bb_unwind_row>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(a[0])) == 0;
}

TEST(RangeAllocator, FirstFitAndMerge) {
    RangeAllocator a(100);
    EXPECT_EQ(a.take(30), 0u);
    EXPECT_EQ(a.take(30), 30u);
    EXPECT_EQ(a.take(30), 60u);
    EXPECT_EQ(a.take(30), std::nullopt);  // 10 left
    a.give(30, 30);
    EXPECT_EQ(a.take(20), 30u);  // the freed range, first
    a.give(30, 20);
    a.give(0, 30);
    a.give(60, 30);
    EXPECT_EQ(a.used(), 0u);
    EXPECT_EQ(a.free_ranges(), 1u);  // all merged again
    EXPECT_EQ(a.take(100), 0u);
}

TEST(UnwindStore, EqualTablesShareOneRegion) {
    Store s(1000, 500);
    auto a = table(100, 1), b = table(100, 1);  // two files, the same content
    auto ra = s.store->place(a), rb = s.store->place(b);
    ASSERT_TRUE(ra && rb) << ra.error() << rb.error();
    EXPECT_EQ(ra->get(), rb->get());
    EXPECT_EQ(s.mem->writes, 1u);
    auto st = s.store->stats();
    EXPECT_EQ(st.rows_used, 100u);
    EXPECT_EQ(st.regions, 1u);
    EXPECT_EQ(st.shares, 2u);
    EXPECT_EQ(st.region_reuses, 1u);
    EXPECT_TRUE(same(s.rows_of(**ra), a->rows));
}

TEST(UnwindStore, DifferentContentNeverShares) {
    Store s(1000, 500);
    // Same size, same hash bucket or not: one rule differs.
    auto a = table(100, 1);
    auto b = std::make_shared<UnwindTable>(*a);
    b->rows[57].cfa_words++;
    auto ra = s.store->place(a), rb = s.store->place(b);
    ASSERT_TRUE(ra && rb);
    EXPECT_NE((*ra)->first_row, (*rb)->first_row);
    EXPECT_TRUE(same(s.rows_of(**ra), a->rows));
    EXPECT_TRUE(same(s.rows_of(**rb), b->rows));
    // Buckets alone differing: not shared either.
    auto c = std::make_shared<UnwindTable>(*a);
    c->buckets.back()++;
    auto rc = s.store->place(c);
    ASSERT_TRUE(rc);
    EXPECT_NE(rc->get(), ra->get());
}

TEST(UnwindStore, ReleasedRegionIsReused) {
    Store s(1000, 500);
    auto keep = s.store->place(table(100, 1));
    uint32_t first;
    {
        auto gone = s.store->place(table(300, 2));
        ASSERT_TRUE(gone);
        first = (*gone)->first_row;
        auto again = s.store->place(table(300, 2));  // a second VM of that build
        EXPECT_EQ(s.store->stats().rows_used, 400u);
    }  // both VMs detached
    auto st = s.store->stats();
    EXPECT_EQ(st.rows_used, 100u);
    EXPECT_EQ(st.regions, 1u);
    // VMs of the same build coming and going: the same space, every time.
    for (int i = 0; i < 100; i++) {
        auto r = s.store->place(table(300, 2));
        ASSERT_TRUE(r) << r.error();
        EXPECT_EQ((*r)->first_row, first);
    }
    EXPECT_EQ(s.store->stats().rows_used, 100u);
}

TEST(UnwindStore, FullStoreRefusesWithAReason) {
    Store s(1000, 500);
    auto a = s.store->place(table(600, 1));
    ASSERT_TRUE(a);
    auto b = s.store->place(table(600, 2));
    ASSERT_FALSE(b);
    EXPECT_NE(b.error().find("no room for its 600 unwind rows"), std::string::npos) << b.error();
    EXPECT_NE(b.error().find("600 of 1000 rows"), std::string::npos) << b.error();
    // Out of buckets, with rows to spare: refused too, and nothing kept taken.
    Store t(1000, 100);
    EXPECT_FALSE(t.store->place(table(600, 1)));
    EXPECT_EQ(t.store->stats().rows_used, 0u);
    EXPECT_EQ(t.store->stats().refused, 1u);
    // Room again once the first goes.
    a = Fail{"released"};
    EXPECT_TRUE(s.store->place(table(600, 2)));
}

TEST(UnwindStore, TablesAreCompiledOncePerFileWhileHeld) {
    Store s(1000, 500);
    FileId f{1, 42, 4096, 10, 20};
    int compiles = 0;
    auto compile = [&] {
        compiles++;
        return *table(10, 3);
    };
    auto a = s.store->table(f, compile);
    auto b = s.store->table(f, compile);
    EXPECT_EQ(a, b);
    EXPECT_EQ(compiles, 1);
    // The same inode changed (another ctime), or another file: compiled again.
    FileId changed = f;
    changed.ctime_ns++;
    auto c = s.store->table(changed, compile);
    EXPECT_NE(c, a);
    EXPECT_EQ(compiles, 2);
    EXPECT_EQ(s.store->stats().tables, 2u);
    // Once no VM holds it, a table is forgotten.
    a.reset();
    b.reset();
    EXPECT_EQ(s.store->stats().tables, 1u);
    s.store->table(f, compile);
    EXPECT_EQ(compiles, 3);
}

TEST(UnwindStore, RegionsOutliveTheStoresOwner) {
    auto mem = std::make_shared<MemoryWriter>(100, 50);
    auto store = UnwindStore::create(100, 50, mem);
    auto r = store->place(table(10, 1));
    ASSERT_TRUE(r);
    store.reset();  // the agent let go first: the region still releases into a live store
    r = Fail{"released"};
}

}  // namespace
}  // namespace bb
