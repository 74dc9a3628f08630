// The GDB JIT interface as the BEAM fills it (erts/emulator/beam/jit/beam_jit_metadata.cpp,
// OTP 25): a doubly linked list of jit_code_entry, each pointing at a "symfile" that is not an
// object file but the VM's own packed struct debug_info (parsed by symbols/jit_symfile.cpp).
// Everything read from the target is untrusted.
#include "symbols/jit_code.hpp"

#include "base/clock.hpp"
#include "base/interner.hpp"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>
#include <time.h>
#include <unordered_set>

namespace bb {

std::shared_ptr<const JitModule> share_module(JitModule m) {
    // Hashed by its offsets: cheap, and different between versions of a module.
    size_t h = std::hash<std::string>{}(m.name) ^ (size_t{m.code_size} << 20) ^ m.ranges.size();
    for (const JitRange& r : m.ranges) {
        h = h * 1000003 ^ (uint64_t{r.start} << 32 | r.end);
        for (const JitLine& l : r.lines) h = h * 31 ^ (uint64_t{l.start} << 32 | l.line);
    }
    static Interner<JitModule> modules;
    return modules.get(std::move(m), h);
}

namespace {

constexpr size_t kMaxEntries = 100'000;         // a real VM has a few hundred to a few thousand
constexpr uint64_t kMaxSymfileSize = 64 << 20;  // the biggest real ones are well under 1 MiB
// All symfiles held at once (a fresh OTP 25 VM: 106 modules in a few MiB): a VM that registers
// 100,000 entries naming one 64 MiB symfile must not make us read 6 TiB. Past it, entries are
// kept without symbols and the refresh says how many.
constexpr uint64_t kMaxSymfileTotal = 512 << 20;
constexpr int kWalkAttempts = 4;
// Retired modules are kept for the samples taken before they went, which are symbolized within
// a second or so: after kRetiredKeepNs they are dropped (checked every kRetiredKeepNs / 2 once
// there are kRetiredSlack of them, so the rebuild after it is rare), and never more than
// kMaxRetiredModules are kept (a reload storm must not grow the profiler either).
constexpr size_t kMaxRetiredModules = 1024;
constexpr size_t kRetiredSlack = 64;
constexpr uint64_t kRetiredKeepNs = 30'000'000'000ull;
constexpr uint64_t kLive = UINT64_MAX;

// struct jit_descriptor without its mutex. Every register (and unregister, in VMs that do it)
// rewrites action_flag/relevant_entry/first_entry, so equal snapshots before and after a walk
// mean the list did not change in between.
struct Descriptor {
    uint32_t version, action;
    uint64_t relevant, first;
    bool operator==(const Descriptor&) const = default;
};
struct Entry {
    uint64_t next, prev, symfile_addr, symfile_size;
};

// Identifies an entry across walks without re-reading its symfile. The symfile's first 24 bytes
// (for a module: kind, base address, range count, code size) are part of it because a purged entry and its symfile may be
// freed and their memory handed to the next module of the same size at the same addresses.
struct Key {
    uint64_t entry = 0, symfile = 0, size = 0;
    std::array<uint64_t, 3> head{};
    auto operator<=>(const Key&) const = default;
};

struct Known {
    Key key;
    uint64_t seen_ns = 0;            // registered (exact), or the first refresh that listed it
    uint64_t retired_ns = kLive;     // unregistered (exact), or the first refresh that found it gone
    std::optional<Key> shadowed_by;  // retired when this newer module took its memory
    // The VM said it was purged. Its entry and symfile may be reused for the next load of the
    // same module at the same place, under the same Key: that is a new module, not this one.
    bool unregistered = false;
    bool over_budget = false;                 // not read: kMaxSymfileTotal was spent
    uint64_t base = 0;                        // where this VM has the module's code
    std::shared_ptr<const JitModule> module;  // null for the emulator entry and unparseable ones
    std::optional<JitEmulator> emulator;
};

struct Slot {
    uint64_t end;  // absolute
    uint64_t seen_ns;
    uint64_t base;
    const JitModule* module;
    const JitRange* range;
};

// `addr` is in [base, base + m.code_size).
const JitRange* find_range(const JitModule& m, uint64_t base, uint64_t addr) {
    uint64_t off = addr - base;
    auto it = std::upper_bound(m.ranges.begin(), m.ranges.end(), off,
                               [](uint64_t a, const JitRange& r) { return a < r.start; });
    if (it == m.ranges.begin()) return nullptr;
    --it;
    return off < it->end ? &*it : nullptr;
}

JitHit make_hit(const JitModule& m, uint64_t base, const JitRange& r, uint64_t addr, uint64_t from, uint64_t until) {
    JitHit h{&m, base, &r, 0, nullptr, from, until};
    auto it = std::upper_bound(r.lines.begin(), r.lines.end(), addr - base,
                               [](uint64_t a, const JitLine& l) { return a < l.start; });
    if (it != r.lines.begin()) {
        --it;
        h.line = it->line;
        h.file = &m.files[it->file];
    }
    return h;
}

}  // namespace

struct JitCodeIndex::Impl {
    const RemoteMemory* mem;
    uint64_t descriptor;
    bool never_unlinks = false;
    JitCodeIndex::Clock clock = nullptr;
    std::vector<Key> last_keys;  // of the last consistent walk, newest first

    // Exact instants from note() for modules no refresh has listed (or unlisted) yet.
    std::map<Key, uint64_t> registered_at, unregistered_at;

    // Entries of the last consistent walk.
    std::map<Key, std::unique_ptr<Known>> listed;
    // Retired entries no longer listed, kept for samples taken before they went away.
    std::vector<std::unique_ptr<Known>> unlisted;

    // Live ranges sorted by start: starts separately so the binary search touches one array.
    std::vector<uint64_t> starts;
    std::vector<Slot> slots;
    // Every retired module (listed or not) by base, for the fallback search.
    std::vector<const Known*> retired;
    uint64_t retired_max_span = 0;

    std::optional<JitEmulator> emulator;
    size_t live_modules = 0;
    uint64_t held_bytes = 0;  // symfile bytes of the modules in `listed` and `unlisted`
    void count_held() {
        held_bytes = 0;
        for (const auto& [k, known] : listed)
            if (known->module) held_bytes += k.size;
        for (const auto& known : unlisted) held_bytes += known->key.size;
    }
    uint64_t generation = 0;

    struct Walk {
        Descriptor head;
        std::vector<Key> keys;
    };
    Result<Walk> walk() const;
    struct Read {
        std::unique_ptr<Known> known;  // null when the symfile cannot be read
        std::string skipped;           // why its symfile was not parsed ("" when it was)
    };
    Read read_known(const Key& k, uint64_t seen_ns, uint64_t budget) const;
    bool is_current(const Key& k) const {
        auto it = listed.find(k);
        return it != listed.end() && !it->second->unregistered;
    }
    // A purged module whose Key is listed again: keep it for earlier samples, unlisted.
    void forget_incarnation(const Key& k) {
        auto it = listed.find(k);
        if (it == listed.end()) return;
        if (it->second->module) unlisted.push_back(std::move(it->second));
        listed.erase(it);
    }
    void retire_overlapped(const Known& by, uint64_t at_ns);
    bool prune_retired(uint64_t now_ns);
    uint64_t next_age_prune_ns = 0;
    // rebuild() for one module: code events come up to hundreds of times a second, and a
    // rebuild sorts every live range.
    void index_live(const Known& k);
    void unindex_live(const Known& k);
    void index_retired(const Known& k);
    // Purged entries whose symbols were dropped (prune_retired): OTP 25 and 26 keep them listed
    // for ever, and a walk must not take them for new ones.
    std::set<Key> dead_keys;
    void apply(const Walk& w, std::map<Key, std::unique_ptr<Known>> fresh, uint64_t now_ns, RefreshResult* res);
    void rebuild();
    std::optional<JitHit> lookup_retired(uint64_t addr, uint64_t sample_ns) const;
};

Result<JitCodeIndex::Impl::Walk> JitCodeIndex::Impl::walk() const {
    Walk w;
    auto head = mem->read<Descriptor>(descriptor);
    if (!head) return Fail{"cannot read __jit_debug_descriptor"};
    if (head->version != 1) return Fail{"unknown JIT descriptor version " + std::to_string(head->version)};
    w.head = *head;
    std::unordered_set<uint64_t> visited;
    for (uint64_t p = head->first; p != 0;) {
        if (w.keys.size() >= kMaxEntries) return Fail{"more than " + std::to_string(kMaxEntries) + " JIT entries"};
        if (!visited.insert(p).second) return Fail{"cycle in the JIT entry list"};
        auto e = mem->read<Entry>(p);
        if (!e) return Fail{"cannot read JIT entry"};
        Key k{p, e->symfile_addr, e->symfile_size, {}};
        if (e->symfile_size >= sizeof(k.head) && !mem->read(e->symfile_addr, std::as_writable_bytes(std::span(k.head))))
            return Fail{"cannot read a JIT symfile header"};
        if (never_unlinks && !last_keys.empty() && k == last_keys.front()) {
            // Nothing below an entry ever changes: the rest is the last walk's list.
            w.keys.insert(w.keys.end(), last_keys.begin(), last_keys.end());
            return w;
        }
        w.keys.push_back(k);
        p = e->next;
    }
    // Where entries are unlinked (and freed), only a list that did not change while we walked
    // it is one the VM had. Where they never are, the list below the head we started from was
    // fixed: entries registered meanwhile are for the next walk.
    auto after = mem->read<Descriptor>(descriptor);
    if (!never_unlinks && (!after || *after != w.head)) return Fail{"JIT entry list changed during the walk"};
    return w;
}

// Reads and parses the symfile of entry `k`; no Known when it cannot be read (freed under us,
// most likely). Unparseable symfiles give a Known without module, remembered as such.
// `budget`: symfile bytes that may still be read (kMaxSymfileTotal less what is held).
JitCodeIndex::Impl::Read JitCodeIndex::Impl::read_known(const Key& k, uint64_t seen_ns, uint64_t budget) const {
    Read r;
    auto& known = r.known;
    known = std::make_unique<Known>();
    known->key = k;
    known->seen_ns = seen_ns;
    if (auto at = registered_at.find(k); at != registered_at.end()) known->seen_ns = at->second;
    if (k.size > kMaxSymfileSize) {
        r.skipped = "symfile of " + std::to_string(k.size) + " bytes";
        return r;
    }
    if (k.size > budget) {
        known->over_budget = true;
        return r;
    }
    auto bytes = mem->read_bytes(k.symfile, k.size);
    if (!bytes) return {};
    // Freed and reused since the entry was seen (a module purged before we got to it): the
    // bytes are someone else's, possibly another module's symfile.
    if (k.size >= sizeof(k.head) && std::memcmp(bytes->data(), k.head.data(), sizeof(k.head)) != 0) return {};
    if (is_emulator_symfile(*bytes)) {
        if (auto e = parse_emulator_symfile(*bytes)) known->emulator = *e;
        else r.skipped = e.error();
    } else if (auto m = parse_module_symfile(*bytes)) {
        known->base = m->base;
        known->module = share_module(std::move(m->module));
    } else {
        r.skipped = m.error();
    }
    return r;
}

JitCodeIndex::RefreshResult JitCodeIndex::refresh(uint64_t now_ns) {
    Impl& s = *impl_;
    RefreshResult res;
    std::string err;
    // Symfiles parsed by an attempt are kept for the next one: a key names one symfile.
    std::map<Key, std::unique_ptr<Known>> fresh;
    // At attach nothing is known yet: try harder against a VM loading code all the time.
    const int attempts = s.listed.empty() ? 10 * kWalkAttempts : kWalkAttempts;
    for (int attempt = 0; attempt < attempts; attempt++) {
        // The VM holds its mutex only for a few pointer writes: give it a moment to finish.
        if (attempt > 0) std::this_thread::sleep_for(std::chrono::microseconds(200 * std::min(attempt, 5)));
        auto w = s.walk();
        if (!w) {
            err = w.error();
            continue;
        }
        // Instants guessed by a refresh must not come before the truth: what this walk listed
        // was loaded, and what it did not list was gone, before the walk ended. (0: at attach,
        // before any sample.)
        if (now_ns != 0) now_ns = std::max(now_ns, s.clock());

        std::string bad;  // first unparseable entry; it is remembered and not parsed again
        size_t bad_count = 0;
        bool torn = false;
        // Bytes held, and read by this refresh whatever they parse to: a symfile is read once
        // (a Known is remembered even when unparseable), so this bounds the work too.
        uint64_t held = s.held_bytes;
        size_t over_budget = 0;
        auto read_bytes = [](const Known& known) {
            return known.over_budget || known.key.size > kMaxSymfileSize ? 0 : known.key.size;
        };
        for (const auto& [k, known] : fresh) held += read_bytes(*known);
        for (const Key& k : w->keys) {
            if (s.is_current(k) || s.dead_keys.contains(k) || fresh.contains(k)) continue;
            auto [known, perr] = s.read_known(k, now_ns, kMaxSymfileTotal - std::min(held, kMaxSymfileTotal));
            if (!known) {
                torn = true;  // walk again
                break;
            }
            over_budget += known->over_budget;
            held += read_bytes(*known);
            if (!perr.empty() && bad_count++ == 0) bad = std::move(perr);
            fresh.emplace(k, std::move(known));
        }
        if (torn) {
            err = "a JIT symfile could not be read";
            continue;
        }
        // What we parsed must belong to the list we walked (symfiles of unlinked entries are
        // freed).
        auto head = s.mem->read<Descriptor>(s.descriptor);
        if (!s.never_unlinks && (!head || *head != w->head)) {
            err = "JIT entry list changed while reading symfiles";
            continue;
        }
        if (bad_count) res.error = std::to_string(bad_count) + " JIT symfile(s) skipped, first: " + bad;
        if (over_budget)
            res.error += (res.error.empty() ? "" : "; ") + std::to_string(over_budget) +
                         " JIT symfile(s) not read: over the " + std::to_string(kMaxSymfileTotal >> 20) +
                         " MiB of JIT symbols read at most";
        s.apply(*w, std::move(fresh), now_ns, &res);
        return res;
    }
    return {0, 0, false, err + " (" + std::to_string(attempts) + " attempts)"};
}

void JitCodeIndex::Impl::apply(const Walk& w, std::map<Key, std::unique_ptr<Known>> fresh, uint64_t now_ns,
                               RefreshResult* res) {
    std::map<Key, std::unique_ptr<Known>> next;
    for (const Key& k : w.keys) {
        if (next.contains(k) || dead_keys.contains(k)) continue;
        if (!is_current(k)) forget_incarnation(k);
        auto it = listed.find(k);
        bool is_new = it == listed.end();
        auto node = is_new ? fresh.extract(k) : listed.extract(it);
        if (is_new && node.mapped()->emulator) emulator = node.mapped()->emulator;
        if (is_new && (node.mapped()->emulator || node.mapped()->module)) res->added++;
        next.insert(std::move(node));
    }
    // Whatever is left of the old list has been unlinked: purged code.
    for (auto& [k, known] : listed) {
        if (known->retired_ns == kLive) {
            auto at = unregistered_at.find(k);
            known->retired_ns = at != unregistered_at.end() ? at->second : now_ns;
            res->retired++;
        }
        if (known->module) unlisted.push_back(std::move(known));
    }
    listed = std::move(next);
    last_keys = w.keys;
    // Instants of modules now listed or unlisted are in their Known; the rest are of code that
    // came and went between two refreshes (or of an event older than its walk), kept a while.
    for (auto* m : {&registered_at, &unregistered_at})
        std::erase_if(*m, [&](const auto& kv) {
            return listed.contains(kv.first) || kv.second + 10'000'000'000ull < now_ns;
        });

    // OTP 25 never unlinks purged modules, so the list can hold an old module whose memory a
    // newer one now uses. The list is pushed at the head, so the first claim on an address wins.
    std::map<uint64_t, std::pair<uint64_t, const Known*>> claimed;  // start -> (end, claimer)
    for (const Key& k : w.keys) {                                   // list order: newest first
        Known& known = *listed.at(k);
        if (!known.module || known.retired_ns != kLive || known.module->code_size == 0) continue;
        uint64_t lo = known.base, hi = lo + known.module->code_size;
        auto after = claimed.lower_bound(lo);
        const Known* by = nullptr;
        if (after != claimed.end() && after->first < hi) by = after->second.second;
        else if (after != claimed.begin() && std::prev(after)->second.first > lo) by = std::prev(after)->second.second;
        if (!by) {
            claimed.emplace(lo, std::make_pair(hi, &known));
        } else {
            // It went when the newer module came (rebuild() follows a corrected instant).
            known.shadowed_by = by->key;
            known.retired_ns = std::min(now_ns, by->seen_ns);
            res->retired++;
        }
    }

    bool pruned = prune_retired(now_ns);
    if (res->added || res->retired || pruned) {
        count_held();
        rebuild();
        generation++;
    }
}

// Forgets retired modules older than kRetiredKeepNs, and the oldest beyond the cap (a VM
// reloading code all day must not grow the profiler). True if it forgot any.
bool JitCodeIndex::Impl::prune_retired(uint64_t now_ns) {
    // Cheap tests first: this runs on every code event. The cap prunes down to 90% of itself,
    // so that the rebuild after it comes once per hundred events, not every time.
    if (retired.size() <= kRetiredSlack) return false;
    if (retired.size() <= kMaxRetiredModules && now_ns < next_age_prune_ns) return false;
    next_age_prune_ns = now_ns + kRetiredKeepNs / 2;
    std::vector<Known*> all_retired;
    for (auto& u : unlisted) all_retired.push_back(u.get());
    for (auto& [k, known] : listed)
        if (known->module && known->retired_ns != kLive) all_retired.push_back(known.get());
    std::sort(all_retired.begin(), all_retired.end(),
              [](const Known* a, const Known* b) { return a->retired_ns < b->retired_ns; });
    size_t drop = 0;
    while (drop < all_retired.size() && all_retired[drop]->retired_ns + kRetiredKeepNs < now_ns) drop++;
    if (all_retired.size() > kMaxRetiredModules)
        drop = std::max(drop, all_retired.size() - kMaxRetiredModules * 9 / 10);
    if (drop == 0) return false;
    for (size_t i = 0; i < drop; i++) all_retired[i]->module.reset();
    std::erase_if(unlisted, [](const auto& u) { return !u->module; });
    for (auto it = listed.begin(); it != listed.end();) {
        if (!it->second->module && !it->second->emulator && it->second->retired_ns != kLive) {
            if (never_unlinks) dead_keys.insert(it->first);  // else no walk lists it again
            it = listed.erase(it);
        } else {
            ++it;
        }
    }
    return true;
}

void JitCodeIndex::Impl::index_live(const Known& k) {
    live_modules++;
    const JitModule& m = *k.module;
    if (m.ranges.empty()) return;
    // Live modules never overlap: the module's ranges go in as one block.
    size_t pos = std::lower_bound(starts.begin(), starts.end(), k.base + m.ranges.front().start) - starts.begin();
    std::vector<uint64_t> s;
    std::vector<Slot> sl;
    for (const JitRange& r : m.ranges) {
        s.push_back(k.base + r.start);
        sl.push_back(Slot{k.base + r.end, k.seen_ns, k.base, &m, &r});
    }
    starts.insert(starts.begin() + pos, s.begin(), s.end());
    slots.insert(slots.begin() + pos, sl.begin(), sl.end());
}

void JitCodeIndex::Impl::unindex_live(const Known& k) {
    live_modules--;
    const JitModule& m = *k.module;
    auto lo = std::lower_bound(starts.begin(), starts.end(), k.base);
    auto hi = std::lower_bound(starts.begin(), starts.end(), k.base + m.code_size);
    slots.erase(slots.begin() + (lo - starts.begin()), slots.begin() + (hi - starts.begin()));
    starts.erase(lo, hi);
}

void JitCodeIndex::Impl::index_retired(const Known& k) {
    auto pos = std::upper_bound(retired.begin(), retired.end(), k.base,
                                [](uint64_t b, const Known* r) { return b < r->base; });
    retired.insert(pos, &k);
    retired_max_span = std::max<uint64_t>(retired_max_span, k.module->code_size);
}

void JitCodeIndex::Impl::rebuild() {
    std::vector<std::pair<uint64_t, Slot>> live;
    retired.clear();
    retired_max_span = 0;
    live_modules = 0;
    auto add_retired = [&](const Known& k) {
        retired.push_back(&k);
        retired_max_span = std::max<uint64_t>(retired_max_span, k.module->code_size);
    };
    for (auto& [key, known] : listed) {
        if (!known->module) continue;
        if (known->shadowed_by)
            if (auto by = listed.find(*known->shadowed_by); by != listed.end())
                known->retired_ns = std::min(known->retired_ns, by->second->seen_ns);
        if (known->retired_ns != kLive) {
            add_retired(*known);
            continue;
        }
        live_modules++;
        for (const JitRange& r : known->module->ranges)
            live.push_back({known->base + r.start,
                            Slot{known->base + r.end, known->seen_ns, known->base, known->module.get(), &r}});
    }
    for (auto& u : unlisted) add_retired(*u);
    std::sort(retired.begin(), retired.end(), [](const Known* a, const Known* b) { return a->base < b->base; });

    // Live modules never overlap (see apply()) and their ranges do not either (the parser).
    std::sort(live.begin(), live.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    starts.clear();
    slots.clear();
    starts.reserve(live.size());
    slots.reserve(live.size());
    for (auto& [start, slot] : live) {
        starts.push_back(start);
        slots.push_back(slot);
    }
}

std::optional<JitHit> JitCodeIndex::Impl::lookup_retired(uint64_t addr, uint64_t sample_ns) const {
    // Several generations of code may have lived at `addr`: the one live at sample_ns is the one
    // that retired first after it.
    const Known* best = nullptr;
    const JitRange* best_range = nullptr;
    auto it = std::upper_bound(retired.begin(), retired.end(), addr,
                               [](uint64_t a, const Known* k) { return a < k->base; });
    while (it != retired.begin()) {
        const Known* k = *--it;
        const JitModule& m = *k->module;
        if (k->base + retired_max_span <= addr) break;  // nothing further left reaches addr
        if (addr >= k->base + m.code_size || sample_ns > k->retired_ns) continue;
        if (best && k->retired_ns >= best->retired_ns) continue;
        if (const JitRange* r = find_range(m, k->base, addr)) best = k, best_range = r;
    }
    if (!best) return std::nullopt;
    return make_hit(*best->module, best->base, *best_range, addr, best->seen_ns, best->retired_ns + 1);
}

std::optional<JitHit> JitCodeIndex::lookup(uint64_t addr, uint64_t sample_ns) const {
    const Impl& s = *impl_;
    const Slot* live = nullptr;
    if (!s.starts.empty() && addr >= s.starts[0]) {
        // Branchless (cmov) binary search for the last start <= addr: this runs per frame, and
        // the branches of std::upper_bound mispredict half the time.
        const uint64_t* base = s.starts.data();
        for (size_t n = s.starts.size(); n > 1;) {
            size_t half = n / 2;
            base = base[half] <= addr ? base + half : base;
            n -= half;
        }
        const Slot& slot = s.slots[base - s.starts.data()];
        if (addr < slot.end) live = &slot;
    }
    // Seen before the sample: whatever used these addresses earlier had retired by then.
    if (live && live->seen_ns < sample_ns)
        return make_hit(*live->module, live->base, *live->range, addr, live->seen_ns, kLive);
    if (!s.retired.empty())
        if (auto r = s.lookup_retired(addr, sample_ns)) return r;
    // A module loaded between two refreshes is first seen after the samples that ran it (valid
    // for this sample only: a later event may place its load after it).
    if (live) return make_hit(*live->module, live->base, *live->range, addr, sample_ns, sample_ns + 1);
    return std::nullopt;
}

JitCodeIndex::JitCodeIndex(const RemoteMemory& mem, uint64_t descriptor_addr, bool never_unlinks, Clock clock)
    : impl_(std::make_unique<Impl>()) {
    impl_->clock = clock ? clock : monotonic_ns;
    impl_->mem = &mem;
    impl_->descriptor = descriptor_addr;
    impl_->never_unlinks = never_unlinks;
}

void JitCodeIndex::Impl::retire_overlapped(const Known& by, uint64_t at_ns) {
    if (!by.module) return;
    uint64_t lo = by.base, hi = lo + by.module->code_size;
    for (auto& [k, known] : listed) {
        if (known.get() == &by || !known->module || known->retired_ns != kLive) continue;
        if (known->base < hi && lo < known->base + known->module->code_size) {
            unindex_live(*known);
            known->retired_ns = at_ns;
            known->shadowed_by = by.key;
            index_retired(*known);
        }
    }
}

void JitCodeIndex::note(const JitCodeEvent& e) {
    Impl& s = *impl_;
    Key k{e.entry, e.symfile, e.symfile_size, e.head};
    bool changed = false;
    if (e.registered) {
        // Registered again under the Key of a module that had gone (same entry and symfile
        // memory, same bytes: the same version loaded at the same place): a new lifetime.
        if (auto it = s.listed.find(k); it != s.listed.end() && it->second->retired_ns != kLive)
            s.forget_incarnation(k);
        if (auto it = s.listed.find(k); it != s.listed.end()) {
            // Listed by a refresh that ran after the load (and before this event was read).
            Known& known = *it->second;
            if (known.seen_ns > e.time_ns) {
                known.seen_ns = e.time_ns;
                if (known.module && known.retired_ns == kLive) {
                    s.unindex_live(known);
                    s.index_live(known);
                }
                // What it took the memory of went at that instant too.
                for (auto& [other_key, other] : s.listed)
                    if (other->shadowed_by == k) other->retired_ns = std::min(other->retired_ns, e.time_ns);
                changed = true;
            }
        } else {
            s.dead_keys.erase(k);  // the VM says it is new
            // Read it now, before it can be purged and freed; the next walk lists it too.
            auto known = s.read_known(k, e.time_ns, kMaxSymfileTotal - std::min(s.held_bytes, kMaxSymfileTotal)).known;
            if (known && (known->module || known->emulator)) {
                if (known->emulator) s.emulator = known->emulator;
                if (known->module) s.held_bytes += k.size;
                const Known& added = *known;
                s.listed.emplace(k, std::move(known));
                s.retire_overlapped(added, e.time_ns);
                if (added.module) s.index_live(added);
                changed = true;
            } else if (s.registered_at.size() < kMaxEntries) {
                s.registered_at.emplace(k, e.time_ns);
            }
        }
    } else {
        Known* known = nullptr;
        if (auto it = s.listed.find(k); it != s.listed.end() && !it->second->unregistered) known = it->second.get();
        for (auto& u : s.unlisted)
            if (!known && u->key == k && !u->unregistered) known = u.get();
        if (known && !known->unregistered) {
            // Gone at this instant, whether or not a walk has noticed yet.
            bool was_live = known->module && known->retired_ns == kLive;
            if (was_live) s.unindex_live(*known);
            known->retired_ns = std::min(known->retired_ns, e.time_ns);
            known->unregistered = true;
            if (was_live) s.index_retired(*known);
            changed = true;
        } else if (!known && s.unregistered_at.size() < kMaxEntries) {
            s.unregistered_at.emplace(k, e.time_ns);
        }
    }
    if (changed) {
        if (s.prune_retired(e.time_ns)) s.rebuild();
        s.generation++;
    }
}

JitCodeIndex::~JitCodeIndex() = default;
JitCodeIndex::JitCodeIndex(JitCodeIndex&&) noexcept = default;
JitCodeIndex& JitCodeIndex::operator=(JitCodeIndex&&) noexcept = default;

const std::optional<JitEmulator>& JitCodeIndex::emulator() const { return impl_->emulator; }
size_t JitCodeIndex::module_count() const { return impl_->live_modules; }
std::vector<JitCodeIndex::LiveRange> JitCodeIndex::live_ranges() const {
    std::vector<LiveRange> out;
    out.reserve(impl_->slots.size());
    for (const Slot& s : impl_->slots) out.push_back({s.base, s.module, s.range});
    return out;
}
size_t JitCodeIndex::range_count() const { return impl_->slots.size(); }
uint64_t JitCodeIndex::generation() const { return impl_->generation; }

}  // namespace bb
