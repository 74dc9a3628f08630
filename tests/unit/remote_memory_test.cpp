// RemoteMemory::read_many against read() on this process's own memory: the same answer for
// every piece, also past one system call's worth and around pieces that cannot be read.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "target/remote_memory.hpp"

namespace {

TEST(RemoteMemory, ManyPiecesReadAsReadReadsEachAndAFailedOneFailsAlone) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), words = page / 8;
    // Two pages, the second then unmapped: a piece in it, one across its start, a null one.
    void* m = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(m, MAP_FAILED);
    auto* word = static_cast<uint64_t*>(m);
    for (size_t i = 0; i < words; i++) word[i] = 3 * i + 1;
    ASSERT_EQ(munmap(static_cast<char*>(m) + page, page), 0);
    const uint64_t base = reinterpret_cast<uint64_t>(m);

    const size_t n = 2500;  // three calls' worth (1024 pieces each)
    std::vector<uint64_t> got(n, 0);
    std::vector<bb::RemoteMemory::Piece> pieces;
    for (size_t i = 0; i < n; i++) {
        uint64_t at = base + 8 * (i % words);
        if (i == 0 || i == 1023) at = base + page;  // unmapped: the first and the last of a call
        if (i == 1500) at = base + page - 4;        // half of it mapped
        if (i == 2000) at = 0;
        pieces.push_back({at, std::as_writable_bytes(std::span(&got[i], 1))});
    }
    pieces.push_back({base, {}});  // nothing to read: read() says true

    bb::RemoteMemory mem{getpid()};
    const std::vector<bool> ok = mem.read_many(pieces);
    ASSERT_EQ(ok.size(), pieces.size());
    for (size_t i = 0; i < n; i++) {
        uint64_t alone = 0;
        const bool expected = mem.read(pieces[i].addr, std::as_writable_bytes(std::span(&alone, 1)));
        EXPECT_EQ(ok[i], expected) << "piece " << i;
        EXPECT_EQ(expected, i != 0 && i != 1023 && i != 1500 && i != 2000) << "piece " << i;
        if (ok[i]) {
            EXPECT_EQ(got[i], 3 * (i % words) + 1) << "piece " << i;
        }
    }
    EXPECT_TRUE(ok.back());
    munmap(m, page);
}

}  // namespace
