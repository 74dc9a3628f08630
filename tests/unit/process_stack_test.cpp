// beam-bpf-procs --stacks's pure parts: the continuation pointers of a stack laid out as the JIT
// lays it out (Y registers, catches, saved frame pointers, the normal exit, words that point
// into no known code), the reader's checks on a stand-in target that runs, collects, exits or
// lies between its reads, and the grouping of stacks.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <vector>

#include "beam_bpf.h"
#include "inspect/process_stack.hpp"
#include "inspect/stack_groups.hpp"

namespace process_stack_test {

using bb::CodeView;
using bb::ProcessEntry;
using bb::ProcessStack;
using bb::StackKey;
using Outcome = ProcessStack::Outcome;

// Known code: two functions' ranges; the normal exit elsewhere.
constexpr uint64_t kCodeLo = 0x7000'0000, kCodeHi = 0x7000'1000, kNormalExit = 0x6000'0040;
const CodeView kCode{.in_code = [](uint64_t a) { return a >= kCodeLo && a < kCodeHi; }, .normal_exit = kNormalExit};
constexpr uint64_t kCatch = 5ull << 6 | 0x1b;  // a catch tag in a Y register

TEST(ProcessStack, ScanFindsTheContinuationPointers) {
    const uint64_t stop = 0x9000'0000, hend = stop + 8 * 10;
    const uint64_t cp1 = kCodeLo + 0x40, cp2 = kCodeLo + 0x800;
    // y0 (a small), a saved frame pointer, the return into f1, f1's y0 (a list) and a catch, a
    // word tagged 00 into no known code, the return into f2, a stack-top frame pointer (== hend),
    // the normal exit.
    const std::vector<uint64_t> words{0x3f, stop + 48, cp1, 0x9000'1001, kCatch, 0x1234'5670, cp2, hend, kNormalExit};
    auto s = bb::scan_stack(words, stop, hend, kCode);
    EXPECT_EQ(s.cps, (std::vector<uint64_t>{cp1, cp2}));
    EXPECT_EQ(s.stray, 1u);
    EXPECT_TRUE(s.bottom);
    EXPECT_EQ(s.leaf_words, 2u);  // y0 and the frame pointer: the leaf frame, before cp1

    // A return address is checked by the call before it: the code's first byte is none, the
    // byte past its last may be one. 0 is the frame-pointer chain's end (the bottom frame's
    // saved rbp, seen on every +JPperf true VM), neither a frame nor stray.
    auto edges = bb::scan_stack(std::vector<uint64_t>{kCodeLo, kCodeHi, 0, kNormalExit}, stop, hend, kCode);
    EXPECT_EQ(edges.cps, (std::vector<uint64_t>{kCodeHi}));
    EXPECT_EQ(edges.stray, 1u);
    EXPECT_TRUE(edges.bottom);
    // No code known at all: nothing is a frame (the normal exit unknown too).
    auto none = bb::scan_stack(words, stop, hend, CodeView{});
    EXPECT_TRUE(none.cps.empty());
    EXPECT_EQ(none.stray, 4u);
    EXPECT_FALSE(none.bottom);
}

// Random words never crash the scan, and what it keeps is always known code, in stack order.
TEST(ProcessStack, ScanOfGarbage) {
    std::mt19937_64 rng(35);
    for (int k = 0; k < 200; k++) {
        std::vector<uint64_t> words(rng() % 300);
        for (auto& w : words) w = rng() % 4 == 0 ? (kCodeLo + rng() % 0x1100) & ~7ull : rng();
        auto s = bb::scan_stack(words, rng(), rng(), kCode);
        size_t at = 0;
        for (uint64_t cp : s.cps) {
            EXPECT_TRUE(kCode.in_code(cp - 1));
            EXPECT_EQ(cp & 3, 0u);
            while (at < words.size() && words[at] != cp) at++;
            ASSERT_LT(at, words.size()) << "a frame not in the words, or out of order";
            at++;
        }
    }
}

// A stand-in for the target: one process whose Process and stack the test changes between the
// reader's reads.
struct Target {
    ProcessEntry proc;
    std::vector<uint64_t> stack;  // words [stop, hend)
    bool torn = false;            // the next Process read is torn (mid-collection)
    int process_reads = 0, stack_reads = 0;
    uint64_t last_addr = 0, last_words = 0;
    std::function<void(Target&)> after_stack_read;  // what the process does while its stack is read
    bool words_fail = false;

    Target() {
        proc.c_p = 0x5000;
        proc.pid = 0x1234ull << 4 | 0x3;
        proc.heap = 0x9000'0000;
        proc.htop = proc.heap + 8 * 100;
        proc.reds = 777;
        proc.i = kCodeLo + 0x10;
        stack = {0x3f, kCodeLo + 0x40, 0x4f, kCodeLo + 0x800, kNormalExit};
        set_stack();
    }
    void set_stack() {
        proc.hend = proc.heap + 8 * 1000;
        proc.stop = proc.hend - 8 * stack.size();
    }
    bb::StackReads reads() {
        return {.process =
                    [this](uint64_t c_p) {
                        process_reads++;
                        bb::ProcessCopy copy;
                        EXPECT_EQ(c_p, proc.c_p);
                        if (torn) {
                            torn = false;
                            copy.torn_pid = proc.pid;
                        } else {
                            copy.entry = proc;
                        }
                        return copy;
                    },
                .words =
                    [this](uint64_t addr, std::span<uint64_t> out) {
                        stack_reads++;
                        last_addr = addr, last_words = out.size();
                        if (words_fail || addr < proc.stop || addr + 8 * out.size() > proc.hend) return false;
                        // The words `stack` holds from stop up; past them (a change moved stop
                        // below them) the memory reads as zeros.
                        std::fill(out.begin(), out.end(), 0);
                        const size_t from = (addr - proc.stop) / 8;
                        if (from < stack.size())
                            std::copy_n(stack.begin() + static_cast<ptrdiff_t>(from),
                                        std::min(out.size(), stack.size() - from), out.begin());
                        if (after_stack_read) after_stack_read(*this);
                        return true;
                    }};
    }
    ProcessStack read(uint64_t max_words = bb::kStackWordsPerProcess) {
        ProcessEntry seen = proc;
        seen.reg_name = 0x55b;  // the table's reading names it
        return bb::read_process_stack(reads(), seen, kCode, max_words);
    }
};

TEST(ProcessStack, AProcessThatHoldsStill) {
    Target t;
    auto s = t.read();
    EXPECT_EQ(s.outcome, Outcome::read);
    EXPECT_EQ(s.attempts, 1);
    EXPECT_EQ(s.scan.cps, (std::vector<uint64_t>{kCodeLo + 0x40, kCodeLo + 0x800}));
    EXPECT_TRUE(s.scan.bottom);
    EXPECT_EQ(s.words_read, 5u);
    EXPECT_EQ(s.words_unread, 0u);
    EXPECT_EQ(s.proc.reg_name, 0x55bu);
    // The table's copy stands for the Process before; one read after.
    EXPECT_EQ(t.process_reads, 1);
    EXPECT_EQ(t.stack_reads, 1);
}

TEST(ProcessStack, AChangeIsReadAgainThenLeftOut) {
    // It runs once while its stack is read (a call: one more reduction, one more frame), then
    // holds still: the second reading is believed, with the new frame.
    Target once;
    once.after_stack_read = [](Target& t) {
        t.after_stack_read = nullptr;
        t.stack.insert(t.stack.begin(), {0x5f, kCodeLo + 0x100});
        t.set_stack();
        t.proc.reds++;
    };
    auto s = once.read();
    EXPECT_EQ(s.outcome, Outcome::read);
    EXPECT_EQ(s.attempts, 2);
    EXPECT_EQ(s.scan.cps.size(), 3u);
    EXPECT_EQ(s.words_copied, 5u + 7u);

    // Each field the check compares, changed during every read: never believed.
    const std::vector<std::function<void(ProcessEntry&)>> changes{
        [](ProcessEntry& p) { p.reds++; },
        [](ProcessEntry& p) { p.stop -= 8; },
        [](ProcessEntry& p) { p.hend += 8, p.stop += 8; },
        [](ProcessEntry& p) { p.i += 4; },
        [](ProcessEntry& p) { p.state ^= BB_PSFLG_RUNNING; },
    };
    for (size_t k = 0; k < changes.size(); k++) {
        Target always;
        always.after_stack_read = [&](Target& t) { changes[k](t.proc); };
        auto r = always.read();
        EXPECT_TRUE(r.outcome == Outcome::changed || (k == 4 && r.outcome == Outcome::busy)) << k;
        EXPECT_TRUE(r.scan.cps.empty()) << k;
        EXPECT_LE(always.stack_reads, 2) << k;
    }

    // Torn after the read (caught collecting), then held still: read again.
    Target torn;
    torn.after_stack_read = [](Target& t) {
        t.after_stack_read = nullptr;
        t.torn = true;
    };
    EXPECT_EQ(torn.read().outcome, Outcome::read);
    EXPECT_EQ(torn.stack_reads, 2);
}

TEST(ProcessStack, ARunningProcessIsNotWalked) {
    Target t;
    t.proc.state = BB_PSFLG_RUNNING;
    auto s = t.read();
    EXPECT_EQ(s.outcome, Outcome::busy);
    EXPECT_STREQ(s.proc.status(), "running");
    EXPECT_EQ(t.stack_reads, 0);
    // Collecting, exiting: the same.
    for (uint32_t state : {BB_PSFLG_GC, BB_PSFLG_EXITING}) {
        Target u;
        u.proc.state = state;
        EXPECT_EQ(u.read().outcome, Outcome::busy);
        EXPECT_EQ(u.stack_reads, 0);
    }
    // Running when the table was read, waiting since: walked.
    Target w;
    ProcessEntry seen = w.proc;
    seen.state = BB_PSFLG_RUNNING;
    auto r = bb::read_process_stack(w.reads(), seen, kCode);
    EXPECT_EQ(r.outcome, Outcome::read);
    EXPECT_STREQ(r.proc.status(), "waiting");
    // Starts running while its stack is read, and stays on: the second reading says running.
    Target starts;
    starts.after_stack_read = [](Target& t) { t.proc.state = BB_PSFLG_RUNNING; };
    EXPECT_EQ(starts.read().outcome, Outcome::busy);
}

TEST(ProcessStack, GoneOrUnreadable) {
    Target gone;
    gone.after_stack_read = [](Target& t) { t.proc.pid += 0x10; };  // another process in its slot
    EXPECT_EQ(gone.read().outcome, Outcome::gone);
    Target freed;
    freed.after_stack_read = [](Target& t) {
        t.torn = true;
        t.proc.pid = 0;
    };
    EXPECT_EQ(freed.read().outcome, Outcome::gone);
    // Held still, but its stack is not mapped: unreadable, not invented.
    Target lies;
    lies.words_fail = true;
    auto s = lies.read();
    EXPECT_EQ(s.outcome, Outcome::unreadable);
    EXPECT_TRUE(s.scan.cps.empty());
}

TEST(ProcessStack, DeepStacksAreBounded) {
    Target t;
    t.stack.clear();
    for (int k = 0; k < 10'000; k++) t.stack.push_back(kCodeLo + 0x40);  // 10,000 frames of one word
    t.stack.push_back(kNormalExit);
    t.set_stack();
    auto s = t.read(4096);
    EXPECT_EQ(s.outcome, Outcome::read);
    EXPECT_EQ(t.last_words, 4096u);
    EXPECT_EQ(t.last_addr, t.proc.stop);  // the leaf-most words
    EXPECT_EQ(s.words_read, 4096u);
    EXPECT_EQ(s.words_unread, 10'001u - 4096u);
    EXPECT_EQ(s.scan.cps.size(), 4096u);
    EXPECT_FALSE(s.scan.bottom);
    auto whole = t.read();
    EXPECT_EQ(whole.scan.cps.size(), 10'000u);
    EXPECT_TRUE(whole.scan.bottom);
    EXPECT_EQ(whole.words_unread, 0u);
}

TEST(ProcessStack, HeldStill) {
    Target t;
    ProcessEntry a = t.proc, b = t.proc;
    EXPECT_TRUE(bb::stack_held_still(a, b));
    b.msgq_len = 5;  // a message arrived: its stack did not move
    b.htop += 8;
    EXPECT_TRUE(bb::stack_held_still(a, b));
    b = a, b.reds++;
    EXPECT_FALSE(bb::stack_held_still(a, b));
    b = a, b.pid += 0x10;
    EXPECT_FALSE(bb::stack_held_still(a, b));
    b = a, b.state = BB_PSFLG_GC;
    EXPECT_FALSE(bb::stack_held_still(a, b));
    b = a, b.state = 1u << 13;  // runnable: not running, and its stack is where it was
    EXPECT_TRUE(bb::stack_held_still(a, b));
}

TEST(StackGroups, BiggestFirstWithTheirFirstMembers) {
    std::vector<StackKey> stacks;
    auto add = [&](const char* state, std::vector<uint32_t> frames, int times) {
        for (int k = 0; k < times; k++) stacks.push_back({state, frames});
    };
    add("waiting", {1, 2}, 2);
    add("waiting", {3, 4, 5}, 5);
    add("runnable", {3, 4, 5}, 1);  // the same frames in another state: another group
    add("waiting", {1, 2}, 1);      // one group with the first two
    add("waiting", {1}, 3);         // a prefix is another stack
    add("running", {9}, 3);
    auto groups = bb::group_stacks(stacks, 2);
    ASSERT_EQ(groups.size(), 5u);
    EXPECT_EQ(groups[0].count, 5u);
    EXPECT_EQ(groups[0].key.frames, (std::vector<uint32_t>{3, 4, 5}));
    EXPECT_EQ(groups[0].first, (std::vector<size_t>{2, 3}));
    // Three groups of 3, in the order they first came.
    EXPECT_EQ(groups[1].key.frames, (std::vector<uint32_t>{1, 2}));
    EXPECT_EQ(groups[1].first, (std::vector<size_t>{0, 1}));
    EXPECT_EQ(groups[2].key.frames, (std::vector<uint32_t>{1}));
    EXPECT_EQ(groups[3].key.state, "running");
    EXPECT_EQ(groups[4].key.state, "runnable");
    EXPECT_EQ(groups[4].count, 1u);
    size_t total = 0;
    for (const auto& g : groups) total += g.count;
    EXPECT_EQ(total, stacks.size());
    EXPECT_TRUE(bb::group_stacks({}).empty());
}

TEST(StackGroups, RunsOfOneFrame) {
    using Runs = std::vector<std::pair<uint32_t, size_t>>;
    EXPECT_EQ(bb::frame_runs({7, 7, 7, 2, 7, 1, 1}), (Runs{{7, 3}, {2, 1}, {7, 1}, {1, 2}}));
    EXPECT_EQ(bb::frame_runs({}), Runs{});
}

}  // namespace process_stack_test
