// beam-bpf-sample -e wall's pure parts: the uniform pick of the processes a tick reads, the
// receive frame's queue buckets, and the callee of a process in gen:do_call/4 found from its
// leaf frame's reference and its monitor tree, laid out as erl_monitor_link.h lays them out
// (ErtsMonLnkNode, with OTP 27's offsets) in this test's own memory, read with
// process_vm_readv as the target's are.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <random>
#include <set>
#include <vector>

#include "inspect/call_target.hpp"
#include "run/wall_profile.hpp"
#include "sampling/wall_sampler.hpp"

namespace {

using namespace bb;

TEST(WallSampler, PicksDistinctProcessesUniformly) {
    std::mt19937_64 rng(7);
    EXPECT_TRUE(pick_uniform(0, 64, rng).empty());
    auto all = pick_uniform(5, 64, rng);  // fewer than asked for: every one
    std::sort(all.begin(), all.end());
    EXPECT_EQ(all, (std::vector<uint32_t>{0, 1, 2, 3, 4}));
    // 3 of 10, 30,000 times: each index is picked 9,000 times in expectation, with a standard
    // deviation of sqrt(30000 * 0.3 * 0.7) = 79; 5 of them is 400.
    std::vector<int> times(10);
    for (int i = 0; i < 30000; i++) {
        auto picked = pick_uniform(10, 3, rng);
        ASSERT_EQ(picked.size(), 3u);
        ASSERT_EQ(std::set<uint32_t>(picked.begin(), picked.end()).size(), 3u);
        for (uint32_t p : picked) {
            ASSERT_LT(p, 10u);
            times[p]++;
        }
    }
    for (int t : times) EXPECT_NEAR(t, 9000, 400);
    // A million processes cost k steps, not a million.
    auto few = pick_uniform(1'000'000, 64, rng);
    EXPECT_EQ(std::set<uint32_t>(few.begin(), few.end()).size(), 64u);
}

TEST(WallSampler, ReceiveQueueBuckets) {
    EXPECT_EQ(receive_frame(0), "[receive, queue 0]");
    EXPECT_EQ(receive_frame(-3), "[receive, queue 0]");  // a torn read: no messages claimed
    EXPECT_EQ(receive_frame(1), "[receive, queue 1-9]");
    EXPECT_EQ(receive_frame(9), "[receive, queue 1-9]");
    EXPECT_EQ(receive_frame(10), "[receive, queue 10-99]");
    EXPECT_EQ(receive_frame(999), "[receive, queue 100-999]");
    EXPECT_EQ(receive_frame(1000), "[receive, queue 1000-9999]");
    EXPECT_EQ(receive_frame(INT64_MAX), "[receive, queue 1000000000000000000-9999999999999999999]");
}

// Zeroed blocks of words that stay put.
class Image {
public:
    uint64_t alloc(size_t words) {
        blocks_.emplace_back(words, 0);
        return reinterpret_cast<uint64_t>(blocks_.back().data());
    }
    static void put(uint64_t addr, uint64_t v) { std::memcpy(reinterpret_cast<void*>(addr), &v, sizeof v); }
    static void put16(uint64_t addr, uint16_t v) { std::memcpy(reinterpret_cast<void*>(addr), &v, sizeof v); }
    const RemoteMemory& mem() const { return mem_; }

private:
    std::deque<std::vector<uint64_t>> blocks_;
    RemoteMemory mem_{getpid()};
};

// An internal reference's words: header (arity 2, REF_SUBTAG) and its numbers.
constexpr uint64_t kRefHeader = 2 << 6 | 0x10;
uint64_t local_pid(uint64_t n) { return n << 4 | 0x3; }

struct MonitorTree {
    Image img;
    VmOffsets o;
    MonitorTree() {
        o.mln_right = 8;
        o.mln_left = 16;
        o.mln_item = 32;
        o.mln_key_offset = 42;
    }
    // A reference with numbers (a, b), boxed.
    uint64_t ref(uint64_t a, uint64_t b) {
        uint64_t at = img.alloc(3);
        Image::put(at, kRefHeader);
        Image::put(at + 8, a);
        Image::put(at + 16, b);
        return at | 2;
    }
    // A monitor node whose key (its own copy of the reference) follows it, as in ErtsMonitorData.
    uint64_t node(uint64_t item, uint64_t key, uint64_t right = 0, uint64_t left = 0) {
        uint64_t at = img.alloc(8);
        Image::put(at + o.mln_right, right);
        Image::put(at + o.mln_left, left);
        Image::put(at + o.mln_item, item);
        Image::put16(at + o.mln_key_offset, 48);
        Image::put(at + 48, key);
        return at;
    }
};

TEST(CallTarget, TheMonitorOfTheFramesReference) {
    MonitorTree t;
    const uint64_t server = local_pid(90), other = local_pid(91), third = local_pid(92);
    // The tree: the call's monitor is a leaf under two others; the frame holds its own copy of
    // the reference (another address, the same words), among other Y registers.
    const uint64_t call = t.node(server, t.ref(111, 222));
    const uint64_t root = t.node(other, t.ref(1, 2), t.node(third, t.ref(3, 4)), call);
    ProcessEntry p;
    p.monitors = root;
    const std::vector<uint64_t> frame{0x3f, t.ref(111, 222), local_pid(5)};
    EXPECT_EQ(call_target(t.img.mem(), t.o, p, frame), server);

    // No reference of the frame is a monitor's: nothing is guessed.
    EXPECT_EQ(call_target(t.img.mem(), t.o, p, std::vector<uint64_t>{t.ref(111, 223)}), std::nullopt);
    // No monitors, or no reference in the frame.
    EXPECT_EQ(call_target(t.img.mem(), t.o, ProcessEntry{}, frame), std::nullopt);
    EXPECT_EQ(call_target(t.img.mem(), t.o, p, std::vector<uint64_t>{0x3f}), std::nullopt);
    // A monitor of something not a local process (a port, a remote process: a boxed term).
    ProcessEntry q;
    q.monitors = t.node(t.ref(7, 7), t.ref(111, 222));
    EXPECT_EQ(call_target(t.img.mem(), t.o, q, frame), std::nullopt);
}

TEST(CallTarget, GarbageIsBounded) {
    MonitorTree t;
    // A tree that loops on itself: bounded by kMaxMonitorNodes, then given up.
    const uint64_t loop = t.node(local_pid(1), t.ref(5, 6));
    Image::put(loop + t.o.mln_left, loop);
    Image::put(loop + t.o.mln_right, loop);
    ProcessEntry p;
    p.monitors = loop;
    EXPECT_EQ(call_target(t.img.mem(), t.o, p, std::vector<uint64_t>{t.ref(111, 222)}), std::nullopt);
    // Pointers to nowhere, a reference header claiming a huge arity, unaligned children.
    const uint64_t huge = t.img.alloc(2);
    Image::put(huge, uint64_t{1000} << 6 | 0x10);
    p.monitors = t.node(local_pid(2), huge | 2, 0x10, 0x13);
    EXPECT_EQ(call_target(t.img.mem(), t.o, p, std::vector<uint64_t>{huge | 2, 0x10 | 2, 0xdead'0000'0002}),
              std::nullopt);
    p.monitors = 0x8;  // unmapped
    EXPECT_EQ(call_target(t.img.mem(), t.o, p, std::vector<uint64_t>{t.ref(1, 1)}), std::nullopt);
    // Random words in the frame and the tree never crash it.
    std::mt19937_64 rng(3);
    for (int i = 0; i < 200; i++) {
        const uint64_t junk = t.img.alloc(16);
        for (int w = 0; w < 16; w++) Image::put(junk + 8 * w, rng() & ~uint64_t{5});
        p.monitors = junk;
        std::vector<uint64_t> frame{rng(), junk | 2, rng() | 2};
        (void)call_target(t.img.mem(), t.o, p, frame);
    }
}

}  // namespace
