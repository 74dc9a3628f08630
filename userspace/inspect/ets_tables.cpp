#include "inspect/ets_tables.hpp"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <set>

#include "base/error.hpp"
#include "beam_bpf.h"
#include "inspect/process_table.hpp"
#include "target/discovery.hpp"

namespace bb {

namespace {

// DB_* status bits of erl_db_util.h (OTP 25 to 29).
constexpr uint32_t kPrivate = 1u << 0, kProtected = 1u << 1, kPublic = 1u << 2, kSet = 1u << 4, kBag = 1u << 5,
                   kDuplicateBag = 1u << 6, kOrderedSet = 1u << 7, kCaOrderedSet = 1u << 8, kFineLocked = 1u << 9,
                   kFreqRead = 1u << 10, kNamedTable = 1u << 11, kFineLockedAuto = 1u << 14;
constexpr uint32_t kProtections = kPrivate | kProtected | kPublic;
constexpr uint32_t kTypes = kSet | kBag | kDuplicateBag | kOrderedSet | kCaOrderedSet;
// ERTS_DB_TABLE_NITEMS_COUNTER_ID and ERTS_DB_TABLE_MEM_COUNTER_ID.
constexpr int kObjects = 0, kBytes = 1;
// More than any table holds (2^47 bytes is the address space): a count past this is not one.
constexpr int64_t kMaxCount = int64_t{1} << 47;
constexpr uint32_t kMaxSlots = 1024;  // +dcg's limit is 256 groups: an array of more is not one

bool one_bit(uint32_t v) { return v && !(v & (v - 1)); }

// The sum of counter `id` over the slots of the decentralized array at `array` (what
// erts_flxctr_read_approx() adds up); nullopt on a failed read.
std::optional<int64_t> slot_sum(const RemoteMemory& mem, const VmOffsets& o, uint64_t array, uint32_t slots, int id) {
    int64_t sum = 0;
    for (uint32_t k = 0; k < slots; k++) {
        // A slot counts what its group added and took away: one alone may be negative.
        auto v = mem.read<int64_t>(array + o.flxctr_array + uint64_t{k} * o.flxctr_elem_size + 8u * id);
        if (!v || *v > kMaxCount || *v < -kMaxCount) return std::nullopt;
        sum += *v;
    }
    return sum;
}

// One table, checked: a protection and a type (one bit each), a pid for owner, an atom for name,
// counts that are counts. nullopt when `tb` is not a live table.
std::optional<EtsTable> read_table(const RemoteMemory& mem, const VmOffsets& o, uint64_t tb, uint32_t slots,
                                   size_t& snapshotting) {
    const uint32_t end = std::max({o.dbt_all_next, o.dbt_owner, o.dbt_name, o.dbt_btid, o.dbt_status,
                                   o.dbt_decentralized, o.dbt_counters + 8}) +
                         8;
    std::vector<std::byte> b(end);
    if ((tb & 7) || !mem.read(tb, b)) return std::nullopt;
    EtsTable t;
    t.address = tb;
    t.owner = field<uint64_t>(b, o.dbt_owner);
    t.name = field<uint64_t>(b, o.dbt_name);
    t.status = field<uint32_t>(b, o.dbt_status);
    t.decentralized = field<uint8_t>(b, o.dbt_decentralized) != 0;
    if ((t.owner & 0xf) != 0x3 || (t.name & 0x3f) != 0x0b || !one_bit(t.status & kProtections) ||
        !one_bit(t.status & kTypes))
        return std::nullopt;
    if (t.decentralized) {
        const uint64_t array = field<uint64_t>(b, o.dbt_counters);
        auto status = array && !(array & 7) ? mem.read<int64_t>(array + o.flxctr_snapshot) : std::nullopt;
        auto objects = status ? slot_sum(mem, o, array, slots, kObjects) : std::nullopt;
        auto bytes = objects ? slot_sum(mem, o, array, slots, kBytes) : std::nullopt;
        if (!bytes) return std::nullopt;
        if (*status != 0) snapshotting++;  // ERTS_FLXCTR_SNAPSHOT_NOT_ONGOING is 0
        t.objects = *objects, t.bytes = *bytes;
    } else {
        t.objects = field<int64_t>(b, o.dbt_counters + 8 * kObjects);
        t.bytes = field<int64_t>(b, o.dbt_counters + 8 * kBytes);
    }
    if (t.objects < 0 || t.objects > kMaxCount || t.bytes < 0 || t.bytes > kMaxCount) return std::nullopt;
    // Its id: the magic binary's reference numbers (unreadable leaves them 0: printed, not trusted).
    if (uint64_t btid = field<uint64_t>(b, o.dbt_btid); btid && !(btid & 7))
        if (auto refn = mem.read<std::array<uint32_t, 3>>(btid + o.mbin_refn)) t.refn = *refn;
    return t;
}

}  // namespace

const char* EtsTable::type() const {
    if (status & kSet) return "set";
    if (status & kBag) return "bag";
    if (status & kDuplicateBag) return "duplicate_bag";
    return "ordered_set";  // DB_ORDERED_SET, or DB_CA_ORDERED_SET: one with write_concurrency
}

const char* EtsTable::protection() const {
    if (status & kPrivate) return "private";
    if (status & kProtected) return "protected";
    return "public";
}

bool EtsTable::named() const { return status & kNamedTable; }
bool EtsTable::read_concurrency() const { return status & kFreqRead; }

const char* EtsTable::write_concurrency() const {
    // erl_db.c's db_info(): a catree is fine-locked; auto is its own answer.
    if (status & kFineLockedAuto) return "auto";
    return status & (kFineLocked | kCaOrderedSet) ? "true" : "false";
}

EtsTables read_ets_tables(const RemoteMemory& mem, const VmOffsets& o, std::span<const uint64_t> lists,
                          uint32_t counter_slots, uint64_t budget) {
    EtsTables r;
    std::set<uint64_t> seen;  // a table on two lists, or twice on one, is a list that moved
    for (uint64_t first : lists) {
        ChainGuard guard;
        uint64_t tb = first;
        while (tb) {
            if (budget == 0 || guard.loops(tb) || !seen.insert(tb).second) {
                r.changed++;
                break;
            }
            budget--;
            auto t = read_table(mem, o, tb, counter_slots, r.snapshotting);
            auto next = t ? mem.read<uint64_t>(tb + o.dbt_all_next) : std::nullopt;
            if (!next) {
                r.changed++;
                break;
            }
            r.tables.push_back(*t);
            tb = *next == first ? 0 : *next;
        }
    }
    return r;
}

uint32_t ets_counter_slots(uint32_t schedulers, uint32_t cpus, const std::vector<std::string>& argv) {
    int64_t limit = 256;  // erts_pre_early_init_cpu_topology()'s default
    // The emulator's flags come before the first "--" (erlexec puts ERL_FLAGS and the like there).
    for (size_t k = 0; k < argv.size() && argv[k] != "--"; k++) {
        // "-dcgN" (erl's +dcgN) or "-dcg N", the last one given (as erl_init.c reads its arguments)
        if (!argv[k].starts_with("-dcg") && !argv[k].starts_with("+dcg")) continue;
        std::string_view v = argv[k].size() > 4    ? std::string_view(argv[k]).substr(4)
                             : k + 1 < argv.size() ? std::string_view(argv[k + 1])
                                                   : std::string_view();
        int64_t n = 0;
        auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (ec == std::errc() && p == v.data() + v.size() && n >= 0) limit = n;
    }
    // max_main_threads: the configured CPUs, at most the schedulers.
    int64_t groups = cpus > schedulers || cpus == 0 ? schedulers : cpus;
    if (groups <= 1 || limit <= 1) groups = 1;
    groups = std::min(groups, limit);
    return uint32_t(std::min<int64_t>(groups + 1, kMaxSlots));
}

EtsTables read_ets_tables(const Vm& vm) {
    const VmOffsets& o = vm.offsets();
    std::vector<uint64_t> lists;
    std::set<uint64_t> esdps;
    for (const SchedThread& t : vm.sched_threads())
        if (t.sched.type == BB_SCHED_NORMAL && t.sched.esdp) esdps.insert(t.sched.esdp);
    if (esdps.empty()) throw UserError("cannot find the VM's schedulers, whose lists hold its ETS tables");
    for (uint64_t esdp : esdps) {
        auto first = vm.mem().read<uint64_t>(esdp + o.esd_ets_clist);
        if (!first) throw UserError("cannot read the VM's scheduler data, whose lists hold its ETS tables");
        lists.push_back(*first);
    }
    auto beam = read_beam("/proc", vm.pid());
    const long cpus = sysconf(_SC_NPROCESSORS_CONF);
    return read_ets_tables(vm.mem(), o, lists,
                           ets_counter_slots(uint32_t(esdps.size()), cpus > 0 ? uint32_t(cpus) : 0,
                                             beam ? beam->argv : std::vector<std::string>{}));
}

}  // namespace bb
