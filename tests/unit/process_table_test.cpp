// The checks on a copy of a Process (process_table.hpp), on buffers laid out with a shipped
// table's offsets: what a live process gives, what a half-made or freed one does not, and
// garbage, which must never crash or pass as a process with impossible sizes.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "inspect/process_table.hpp"

namespace {

using bb::ProcessEntry;

struct Copy {
    bb::VmOffsets o = *bb::builtin_offsets("27", "", "");
    std::vector<std::byte> bytes = std::vector<std::byte>(o.proc_size);
    void set(uint32_t off, uint64_t v) { std::memcpy(bytes.data() + off, &v, sizeof v); }
    void set32(uint32_t off, uint32_t v) { std::memcpy(bytes.data() + off, &v, sizeof v); }
    Copy() {
        const uint64_t heap = 0x7f0000000000;
        set(o.proc_id, 0x1234ull << 4 | 0x3);
        set(o.proc_heap, heap);
        set(o.proc_htop, heap + 8 * 100);
        set(o.proc_stop, heap + 8 * 990);
        set(o.proc_hend, heap + 8 * 1000);
        set(o.proc_heap_sz, 1000);
        set(o.proc_old_heap, 0x7f1000000000);
        set(o.proc_old_hend, 0x7f1000000000 + 8 * 2000);
        set(o.proc_old_htop, 0x7f1000000000 + 8 * 1500);
        set(o.proc_mbuf_sz, 5);
        set(o.proc_reds, 777);
        set(o.proc_msgq_len, 3);
    }
    std::optional<ProcessEntry> parse() const { return bb::parse_process(bytes, 0x5000, o); }
};

TEST(ProcessTable, LiveProcess) {
    Copy c;
    auto e = c.parse();
    ASSERT_TRUE(e);
    EXPECT_EQ(e->heap_sz, 1000u);
    EXPECT_EQ(e->old_heap_sz, 2000u);
    EXPECT_EQ(e->stack_sz, 10u);
    EXPECT_EQ(e->total_heap_sz(), 3005u);
    EXPECT_EQ(e->memory(c.o.proc_size), c.o.proc_size + 8 * 3005u);
    EXPECT_EQ(e->reds, 777u);
    EXPECT_EQ(e->msgq_len, 3);
    EXPECT_STREQ(e->status(), "waiting");
}

TEST(ProcessTable, StatusAsTheVmNamesIt) {
    Copy c;
    const std::pair<uint32_t, const char*> cases[] = {
        {1u << 11, "exiting"},   {1u << 17 | 1u << 15, "garbage_collecting"},
        {1u << 16, "suspended"}, {1u << 15, "running"},
        {1u << 29, "running"},   {1u << 13, "runnable"},
        {1u << 20, "runnable"},  {0, "waiting"}};
    for (auto [state, status] : cases) {
        c.set32(c.o.proc_state, state);
        auto e = c.parse();
        ASSERT_TRUE(e) << status;
        EXPECT_STREQ(e->status(), status) << state;
    }
}

TEST(ProcessTable, WhatIsNotALiveProcess) {
    {
        Copy c;
        c.set(c.o.proc_id, 0x1234ull << 4 | 0x7);  // a port's tag
        EXPECT_FALSE(c.parse());
    }
    {
        Copy c;
        c.set32(c.o.proc_state, 1u << 10);  // ERTS_PSFLG_FREE
        EXPECT_FALSE(c.parse());
    }
    {
        Copy c;
        c.set(c.o.proc_htop, 0x7f0000000000 + 8 * 995);  // htop above the stack
        EXPECT_FALSE(c.parse());
    }
    {
        Copy c;
        c.set(c.o.proc_old_hend, 0x10);  // old_hend below old_heap
        EXPECT_FALSE(c.parse());
    }
    {
        Copy c;
        c.set(c.o.proc_heap_sz, ~0ull);
        EXPECT_FALSE(c.parse());
    }
    Copy c;
    EXPECT_FALSE(bb::parse_process(std::span(c.bytes).first(8), 0x5000, c.o));  // short copy
}

TEST(ProcessTable, GarbageNeverPassesWithImpossibleSizes) {
    std::mt19937_64 rng(11);
    Copy c;
    int passed = 0;
    for (int round = 0; round < 20000; round++) {
        for (size_t i = 0; i + 8 <= c.bytes.size(); i += 8) c.set(i, rng() % 3 ? rng() : rng() & 0xffff);
        if (auto e = c.parse()) {
            passed++;
            EXPECT_LE(e->total_heap_sz(), 3ull << 37);
        }
    }
    EXPECT_LT(passed, 20);  // random words are almost never a process
}

}  // namespace
