#include "inspect/process_stack.hpp"

#include <algorithm>
#include <cstring>
#include <memory>

namespace bb {

namespace {
constexpr uint32_t kPsFree = 1u << 10;  // ERTS_PSFLG_FREE (process_table.cpp)
}  // namespace

StackScan scan_stack(std::span<const uint64_t> words, uint64_t stop, uint64_t hend, const CodeView& code) {
    StackScan s;
    s.leaf_words = words.size();
    for (const uint64_t& w : words) {
        if ((w & 3) != 0) continue;  // a term (Y register) or a catch
        // A saved frame pointer (a VM with frame pointers), or the null one the chain ends
        // with (the bottom frame's, just above the normal exit).
        if ((w >= stop && w <= hend) || w == 0) continue;
        if (w == code.normal_exit) {  // the bottom of the stack: returns to no caller
            s.bottom = true;
            continue;
        }
        if (code.in_code && code.in_code(w - 1)) {
            if (s.cps.empty()) s.leaf_words = static_cast<size_t>(&w - words.data());
            s.cps.push_back(w);
        } else {
            s.stray++;
        }
    }
    return s;
}

StackReads stack_reads(const RemoteMemory& mem, const VmOffsets& o) {
    auto buf = std::make_shared<std::vector<std::byte>>(o.proc_size);
    return {
        .process =
            [&mem, &o, buf](uint64_t c_p) {
                ProcessCopy copy;
                if (!c_p || (c_p & 7) || !mem.read(c_p, *buf)) return copy;
                copy.entry = parse_process(*buf, c_p, o);
                if (!copy.entry) {
                    uint64_t pid = 0;
                    uint32_t state = 0;
                    std::memcpy(&pid, buf->data() + o.proc_id, sizeof pid);
                    std::memcpy(&state, buf->data() + o.proc_state, sizeof state);
                    if ((pid & 0xf) == 0x3 && !(state & kPsFree)) copy.torn_pid = pid;
                }
                return copy;
            },
        .words =
            [&mem](uint64_t addr, std::span<uint64_t> words) {
                return words.empty() || mem.read(addr, std::as_writable_bytes(words));
            },
    };
}

bool stack_held_still(const ProcessEntry& before, const ProcessEntry& after) {
    return before.pid == after.pid && !before.busy() && !after.busy() && before.stop == after.stop &&
           before.hend == after.hend && before.reds == after.reds && before.i == after.i;
}

ProcessStack read_process_stack(const StackReads& reads, const ProcessEntry& seen, const CodeView& code,
                                uint64_t max_words) {
    using Outcome = ProcessStack::Outcome;
    ProcessStack out;
    out.proc = seen;
    // Its registered name is read with the table, not with each copy: the one `seen` has.
    auto done = [&](Outcome outcome) {
        out.outcome = outcome;
        out.proc.reg_name = seen.reg_name;
        return out;
    };
    std::vector<uint64_t> words;
    for (int attempt = 1; attempt <= 2; attempt++) {
        out.attempts = attempt;
        // The first read takes `seen` as the copy before, unless it found the process running
        // (it may have stopped since); the second reads the Process afresh.
        ProcessEntry before = seen;
        if (attempt == 2 || seen.busy()) {
            ProcessCopy copy = reads.process(seen.c_p);
            if (!copy.entry) {
                // Torn: caught mid-collection (busy, if `seen` says it was running or
                // collecting; else it started since: a change). Else it is gone.
                return done(copy.torn_pid != seen.pid ? Outcome::gone : seen.busy() ? Outcome::busy : Outcome::changed);
            }
            if (copy.entry->pid != seen.pid) {
                return done(Outcome::gone);
            }
            before = *copy.entry;
        }
        out.proc = before;
        if (before.busy()) {
            return done(Outcome::busy);
        }
        const uint64_t depth = (before.hend - before.stop) / 8;  // parse_process: stop <= hend
        words.resize(std::min(depth, max_words));
        const bool ok = reads.words(before.stop, words);
        out.words_copied += words.size();
        ProcessCopy after = reads.process(seen.c_p);
        if (after.entry ? after.entry->pid != seen.pid : after.torn_pid != seen.pid) {
            return done(Outcome::gone);
        }
        if (!after.entry || !stack_held_still(before, *after.entry)) {
            if (after.entry) out.proc = *after.entry;
            out.outcome = Outcome::changed;
            continue;
        }
        out.proc = *after.entry;
        if (!ok) {
            return done(Outcome::unreadable);
        }
        out.scan = scan_stack(words, before.stop, before.hend, code);
        out.leaf_frame.assign(words.begin(),
                              words.begin() + static_cast<ptrdiff_t>(std::min(out.scan.leaf_words, kLeafFrameWords)));
        out.words_read = words.size();
        out.words_unread = depth - words.size();
        return done(Outcome::read);
    }
    return done(Outcome::changed);
}

}  // namespace bb
