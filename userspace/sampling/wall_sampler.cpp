#include "sampling/wall_sampler.hpp"

#include <algorithm>
#include <unordered_map>

#include "base/error.hpp"
#include "inspect/call_target.hpp"

namespace bb {

std::vector<uint32_t> pick_uniform(uint32_t n, uint32_t k, std::mt19937_64& rng) {
    k = std::min(k, n);
    // A partial Fisher-Yates shuffle over a sparse map of the positions moved: k steps and O(k)
    // memory whatever n is (a million processes cost no million-entry array).
    std::unordered_map<uint32_t, uint32_t> moved;  // position -> the value now there
    auto at = [&](uint32_t pos) {
        auto it = moved.find(pos);
        return it == moved.end() ? pos : it->second;
    };
    auto set = [&](uint32_t pos, uint32_t value) { moved[pos] = value; };
    std::vector<uint32_t> out;
    out.reserve(k);
    for (uint32_t i = 0; i < k; i++) {
        uint32_t j = i + static_cast<uint32_t>(std::uniform_int_distribution<uint64_t>(0, n - 1 - i)(rng));
        uint32_t vi = at(i), vj = at(j);
        out.push_back(vj);
        set(j, vi);
        set(i, vj);
    }
    return out;
}

ProcessTableRef process_table_ref(const RemoteMemory& mem, const VmOffsets& o, uint64_t erts_proc) {
    auto tab = mem.read<uint64_t>(erts_proc + o.ptab_tab);
    auto max = mem.read<uint32_t>(erts_proc + o.ptab_max);
    // process_table.cpp's bound: a table of more than 2^27 slots is not a VM's.
    if (!tab || !max || *max == 0 || *max > (1u << 27)) throw UserError("cannot read the VM's process table");
    return {*tab, *max};
}

WallSampler::WallSampler(const RemoteMemory& mem, const VmOffsets& o, ProcessTableRef table, CodeView code,
                         WallConfig cfg)
    : mem_(mem),
      o_(o),
      reads_(stack_reads(mem, o)),
      table_(table),
      code_(std::move(code)),
      cfg_(std::move(cfg)),
      rng_(cfg_.seed) {}

std::optional<ProcessEntry> WallSampler::process_of(uint64_t pid) {
    const uint64_t slot = cfg_.slot_of ? cfg_.slot_of(pid) : table_.max;
    if (slot >= table_.max) return std::nullopt;
    auto c_p = mem_.read<uint64_t>(table_.tab + 8 * slot);
    if (!c_p) return std::nullopt;
    ProcessCopy copy = reads_.process(*c_p);
    if (!copy.entry || copy.entry->pid != pid) return std::nullopt;
    read_reg_name(mem_, o_, *copy.entry);
    return copy.entry;
}

void WallSampler::keep(WallTick& t, WallProcess w) {
    read_reg_name(mem_, o_, w.stack.proc);
    if (w.stack.outcome == ProcessStack::Outcome::read && cfg_.in_monitored_call &&
        std::string_view(w.stack.proc.status()) == "waiting" && cfg_.in_monitored_call(w.stack.proc.i)) {
        find_callee(t, w);
        (w.call == WallProcess::Call::named ? t.calls_named : t.calls_unknown)++;
    }
    t.processes.push_back(std::move(w));
}

void WallSampler::find_callee(WallTick& t, WallProcess& w) {
    const ProcessEntry& p = w.stack.proc;
    std::optional<uint64_t> callee = call_target(mem_, o_, p, w.stack.leaf_frame);
    // The monitor tree is the process's own: unchanged if the process did not run meanwhile.
    ProcessCopy after = reads_.process(p.c_p);
    t.process_reads++;
    if (!callee || !after.entry || !stack_held_still(p, *after.entry)) {
        w.call = WallProcess::Call::unknown;
        return;
    }
    w.call = WallProcess::Call::named;
    w.callee.pid = *callee;
    t.process_reads++;
    if (auto e = process_of(*callee)) w.callee = *e;
}

WallTick WallSampler::tick() {
    WallTick t;
    if (only_) {
        chunks_.assign(1, {only_->first});
    } else {
        // The slots in chunks of 64 KiB, the next cfg_.slots_per_tick of them each tick, round
        // the table: a slot is a Process pointer, 0 when free, or a marker with low bits set
        // while it is being filled or emptied (process_table.cpp).
        const uint32_t chunks = (table_.max + kSlotChunk - 1) / kSlotChunk;
        // All of it at the first tick: each chunk has been read once from then on.
        const uint32_t per_tick = chunks_.empty() ? chunks
                                                  : std::clamp<uint32_t>(cfg_.slots_per_tick / kSlotChunk, 1, chunks);
        chunks_.resize(chunks);
        for (uint32_t n = 0; n < per_tick; n++, next_chunk_ = (next_chunk_ + 1) % chunks) {
            const uint32_t first = next_chunk_ * kSlotChunk;
            slots_.resize(std::min(kSlotChunk, table_.max - first));
            if (!mem_.read(table_.tab + 8ull * first, std::as_writable_bytes(std::span(slots_))))
                throw UserError("cannot read the VM's process table");
            t.slot_bytes += 8 * slots_.size();
            std::vector<uint64_t>& live = chunks_[next_chunk_];
            live.clear();
            for (uint64_t p : slots_)
                if (p != 0 && !(p & 7)) live.push_back(p);
        }
    }
    // Each live process once, uniformly: an index into the chunks' lists laid end to end.
    uint64_t live = 0;
    ends_.clear();
    for (const auto& c : chunks_) ends_.push_back(live += c.size());
    t.live = static_cast<uint32_t>(live);
    uint64_t words_left = cfg_.words_per_tick;
    for (uint32_t index : pick_uniform(t.live, cfg_.per_tick, rng_)) {
        const size_t chunk = static_cast<size_t>(std::upper_bound(ends_.begin(), ends_.end(), index) - ends_.begin());
        const uint64_t c_p = chunks_[chunk][index - (chunk ? ends_[chunk - 1] : 0)];
        ProcessCopy copy = reads_.process(c_p);
        t.process_reads++;
        // A slot read a moment ago may hold a process that exited since, or another one: the
        // pid is what its Process holds now, and --process's must be the one asked for.
        if (!copy.entry || (only_ && copy.entry->pid != only_->second)) {
            if (copy.torn_pid && (!only_ || copy.torn_pid == only_->second)) t.changed++;
            else t.exited++;
            continue;
        }
        WallProcess w;
        if (words_left == 0) {
            w.stack.outcome = ProcessStack::Outcome::busy;
            w.stack.proc = *copy.entry;
            w.not_read = !copy.entry->busy();
            keep(t, std::move(w));
            continue;
        }
        w.stack = read_process_stack(reads_, *copy.entry, code_, std::min(kStackWordsPerProcess, words_left));
        t.process_reads += w.stack.attempts + (w.stack.attempts > 1);
        words_left -= std::min(words_left, w.stack.words_copied);
        t.words += w.stack.words_copied;
        switch (w.stack.outcome) {
        case ProcessStack::Outcome::read:
        case ProcessStack::Outcome::busy: keep(t, std::move(w)); break;
        case ProcessStack::Outcome::changed: t.changed++; break;
        case ProcessStack::Outcome::gone: t.exited++; break;
        case ProcessStack::Outcome::unreadable: t.unreadable++; break;
        }
    }
    if (only_ && t.exited) t.live = 0;
    return t;
}

}  // namespace bb
