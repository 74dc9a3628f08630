// libFuzzer target: the lists beam-bpf-procs walks beside a process's heap (process_table.hpp),
// whose input is the target VM's memory: the off-heap binary lists (read_binaries()) and the
// message queues, dictionary and ErtsPSD (add_outside_memory()); and the schedulers' lists of ETS
// tables with their counters (read_ets_tables()). The input is that memory. Its
// first eight words are the heads a Process holds (off_heap.first, mbuf, wrt_bins, the three
// queues, the dictionary, the ErtsPSD; the first two are also two schedulers' ETS lists); a word with its low bit set is a pointer into the input
// (its start + (word >> 1) modulo its size, aligned), so that lists looping, crossing, ending in
// the middle of a node or leaving the input are all within reach. Offsets are OTP 27's table;
// the term layout is 25's or 29's by the first byte.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "inspect/ets_tables.hpp"
#include "inspect/process_table.hpp"
#include "target/offsets.hpp"
#include "target/remote_memory.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const bb::VmOffsets o = *bb::builtin_offsets("27", "", "");
    static const bb::RemoteMemory mem(getpid());
    if (size < 64) return 0;
    std::vector<uint64_t> words((size + 7) / 8);
    std::memcpy(words.data(), data, size);
    const uint64_t base = reinterpret_cast<uint64_t>(words.data()), bytes = 8 * words.size();
    for (uint64_t& w : words)
        if (w & 1) w = base + ((w >> 1) % bytes & ~uint64_t{7});
    bb::ProcessEntry e;
    e.off_heap = words[0], e.mbuf = words[1], e.wrt_bins = words[2], e.sig_first = words[3];
    e.sig_cont = words[4], e.sig_inq_first = words[5], e.dictionary = words[6], e.psd = words[7];
    uint64_t budget = 100'000;
    uint64_t seen = 0;
    bb::read_binaries(mem, o, (data[0] & 2) ? bb::kTerms29 : bb::kTerms25, e, budget,
                      [&](const bb::BinaryHold&) { seen++; });
    if (seen != e.binary_count || budget > 100'000) __builtin_trap();  // every one counted, the bound kept
    bb::add_outside_memory(mem, o, e, 100'000);
    const uint64_t lists[] = {words[0], words[1]};
    if (bb::read_ets_tables(mem, o, lists, 1 + data[1] % 8, 10'000).tables.size() > 10'000) __builtin_trap();
    return 0;
}
