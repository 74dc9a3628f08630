// One Erlang process's stack, read from outside while the process is not running: the function
// it resumes in (its `i`) and the continuation pointers on its stack [stop, hend), each
// validated as the BPF walker validates its own. Bounded, never a write, never a pause: a
// process that runs while it is read is read again once, then given up, never shown wrong.
// beam-bpf-procs --stacks reads every process with it; beam-bpf-sample -e wall a sample of them
// each tick (sampling/wall_sampler.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "inspect/process_table.hpp"
#include "target/offsets.hpp"
#include "target/remote_memory.hpp"

namespace bb {

// Words of one process's stack read at most: the walker's scan past its last kept frame
// (BB_ROOT_SCAN_WORDS, 128 KiB). A deeper stack keeps its leaf-most frames and says it is
// truncated.
constexpr uint64_t kStackWordsPerProcess = 16'384;
// The JIT's trampoline a process with no frame resumes in (beam_run_process): a hibernated one
// (erlang:hibernate/3 empties its stack and sets its `i` there, erts_hibernate()) or one
// spawned and not yet run. Shown as what it is, not as this stub.
constexpr const char* kRunProcess = "erts_beamasm:run_process/3";
// What a process resuming in kRunProcess with no frame is: "[hibernated]" when it waits, else
// "[spawned, not yet run]".
inline const char* run_process_frame(const ProcessEntry& p) {
    return std::string_view(p.status()) == "waiting" ? "[hibernated]" : "[spawned, not yet run]";
}

// Y registers of the leaf frame kept (ProcessStack::leaf_frame).
constexpr size_t kLeafFrameWords = 32;

// What a continuation pointer may point into. This stage does not see the JIT code index
// (symbols/): the tool hands it in.
struct CodeView {
    // True when `addr` is inside the code of a function the JIT code index knows.
    std::function<bool(uint64_t addr)> in_code;
    // The stub at the bottom of every Erlang stack (the emulator's symfile), 0 if unknown: it
    // returns to no caller, so it is no frame.
    uint64_t normal_exit = 0;
};

// The frames a copy of a stack's words holds.
struct StackScan {
    std::vector<uint64_t> cps;  // continuation pointers, leaf first; the normal exit left out
    // Words before the first continuation pointer: the leaf frame's Y registers (all of the
    // words when there is none).
    size_t leaf_words = 0;
    // Words tagged as a continuation pointer (low bits 00) that point neither into known code
    // nor into the stack (a saved frame pointer), and are not 0: skipped, as the BPF walker
    // skips them.
    size_t stray = 0;
    bool bottom = false;  // the normal exit was among the words
};

// The continuation pointers of `words`, the stack's words from `stop` up (all of [stop, hend),
// or its leaf-most part). A word with tag bits 00 is a continuation pointer when the call it
// returns from (the byte before it) is known code; a word that points into [stop, hend] is a
// saved frame pointer (a VM with frame pointers) and is skipped, as root_set() skips it, and so
// is 0, the saved frame pointer of the bottom frame (where the chain ends). Pure.
StackScan scan_stack(std::span<const uint64_t> words, uint64_t stop, uint64_t hend, const CodeView& code);

// A copy of a Process as read_process_stack() sees it: checked (parse_process()), or, when it
// does not verify, the pid it holds if it is still a live process's (its heap pointers torn:
// caught mid-collection), else 0 (exited, freed, never read).
struct ProcessCopy {
    std::optional<ProcessEntry> entry;
    uint64_t torn_pid = 0;
};

// The reads read_process_stack() makes of the target: a copy of the Process at c_p, and words of
// memory (all or nothing). stack_reads() makes them from the VM's memory; the tests stand in
// for it.
struct StackReads {
    std::function<ProcessCopy(uint64_t c_p)> process;
    std::function<bool(uint64_t addr, std::span<uint64_t> words)> words;
};
StackReads stack_reads(const RemoteMemory& mem, const VmOffsets& o);

// Held still while its stack was read, as far as a reader can tell: the same pid, not running,
// collecting or exiting in either copy, and the same stop, hend, reductions and resume address.
// A continuation pointer changes only by a call or a return: a call costs a reduction and a
// return moves stop, so a stack whose CPs changed between the two copies fails this.
bool stack_held_still(const ProcessEntry& before, const ProcessEntry& after);

struct ProcessStack {
    enum class Outcome {
        read,        // `scan` holds its frames
        busy,        // running, collecting or exiting: not walked; `proc` names its state and function
        changed,     // it changed during each of two reads: dropped, never shown
        gone,        // it exited (its slot holds another process, or a Process that does not verify)
        unreadable,  // it held still but its stack did not read (memory its Process points at is not mapped)
    };
    Outcome outcome = Outcome::gone;
    ProcessEntry proc;  // the copy the result holds for (the one after the read, for `read`)
    StackScan scan;
    // The leaf frame's Y registers (at most kLeafFrameWords): what a process waiting in a
    // receive keeps live across it (gen:do_call/4's monitor reference, say).
    std::vector<uint64_t> leaf_frame;
    uint64_t words_read = 0;
    uint64_t words_unread = 0;  // past max_words: its root-most frames are not in `scan`
    uint64_t words_copied = 0;  // words of stack read over every attempt (what a budget counts)
    int attempts = 0;           // reads of its stack (1 or 2)
};

// Reads the stack of the process `seen` is a checked copy of (a Process read before: the
// process table's): at most max_words words from its stop, then its Process again, which must
// have held still (stack_held_still). If it did not, the Process and its stack are read once
// more, and then the process is given up (Outcome::changed). A process found running (in the
// second reading, or already in `seen`) is Outcome::busy with that copy.
ProcessStack read_process_stack(const StackReads& reads, const ProcessEntry& seen, const CodeView& code,
                                uint64_t max_words = kStackWordsPerProcess);

}  // namespace bb
