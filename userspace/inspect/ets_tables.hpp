// The VM's ETS tables as its DbTable structs say, read from outside: each normal scheduler keeps
// the tables created on it on a circular list (esdp->ets_tables.clist, through each table's
// common.all), and each table counts its objects and bytes itself (common.counters), as
// ets:info(T, size) and ets:info(T, memory) read them. Nothing is written, no table is locked.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "target/offsets.hpp"
#include "target/remote_memory.hpp"
#include "target/vm.hpp"

namespace bb {

struct EtsTable {
    uint64_t address = 0;            // its DbTable
    uint64_t name = 0;               // the_name, an atom term
    uint64_t owner = 0;              // a pid term
    uint32_t status = 0;             // DB_* bits (erl_db_util.h, the same in OTP 25 to 29)
    std::array<uint32_t, 3> refn{};  // its id, #Ref<0.refn[2].refn[1].refn[0]>
    int64_t objects = 0, bytes = 0;
    bool decentralized = false;  // counters summed over the counter groups' slots

    const char* type() const;        // set, ordered_set, bag, duplicate_bag
    const char* protection() const;  // private, protected, public
    bool named() const;
    bool read_concurrency() const;
    const char* write_concurrency() const;  // "true", "false" or "auto", as ets:info/2 says
};

struct EtsTables {
    std::vector<EtsTable> tables;
    // Lists that ended somewhere other than where they began (a table deleted or created while
    // read, or memory that is not a table): their tables read so far are kept.
    size_t changed = 0;
    // Tables whose decentralized counters were being snapshot (by an ets:info/2 on them) while
    // read: their counts are the part not yet folded into the new array, too low.
    size_t snapshotting = 0;
};

// A read of the tables at the heads of `lists` (each scheduler's clist), with decentralized
// counters of `counter_slots` slots (erl_flxctr.c's reader_groups_array_size). At most `budget`
// tables are read in all.
EtsTables read_ets_tables(const RemoteMemory& mem, const VmOffsets& o, std::span<const uint64_t> lists,
                          uint32_t counter_slots, uint64_t budget = 1'000'000);

// The slots of a decentralized counter array in a VM with `schedulers` normal schedulers on a
// host of `cpus` configured CPUs, started with `argv` (erl's +dcg, the emulator's -dcg, sets the limit on counter groups,
// 256 by default): erts_early_init_cpu_topology()'s groups, plus one.
uint32_t ets_counter_slots(uint32_t schedulers, uint32_t cpus, const std::vector<std::string>& argv);

// Every table of the live VM. UserError if the scheduler data cannot be found or read.
EtsTables read_ets_tables(const Vm& vm);

}  // namespace bb
