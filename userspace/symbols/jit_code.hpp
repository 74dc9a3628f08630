// Symbols of the VM's JIT code, read from the GDB JIT interface (__jit_debug_descriptor),
// which the VM keeps current for debuggers and which survives stripping.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <array>
#include <string>
#include <vector>

#include "symbols/jit_symfile.hpp"
#include "target/remote_memory.hpp"

namespace bb {

// The one copy of `m` in this process: equal modules, read from any VM, share it for as long as
// an index holds one (the agent follows VMs of one release by the dozen; each loads the same
// modules, and its symbols were most of the memory it cost).
std::shared_ptr<const JitModule> share_module(JitModule m);

struct JitHit {
    const JitModule* module = nullptr;
    uint64_t base = 0;  // where this VM has the module's code
    const JitRange* range = nullptr;
    uint32_t line = 0;  // 0 when unknown
    const std::string* file = nullptr;
    // The same address gives this hit for samples taken in [valid_from, valid_until): the
    // module's known lifetime (a cache of lookups must stay inside it).
    uint64_t valid_from = 0, valid_until = 0;
};

// The VM's own announcement of JIT code (a BB_WHERE_CODE_EVENT record): what was
// (un)registered and the exact instant.
struct JitCodeEvent {
    bool registered = true;  // false: unregistered (purged; OTP 27 and later)
    uint64_t entry = 0, symfile = 0, symfile_size = 0;
    std::array<uint64_t, 3> head{};  // the symfile's first 24 bytes
    uint64_t time_ns = 0;
};

// The live index. refresh() re-walks the descriptor's entry list (bounded), parses symfiles it
// has not seen, and retires entries that vanished (purged code), keeping them for lookups of
// samples taken before they went. A listed module whose code is overlapped by a newer listed one
// (OTP 25 and 26 never unlink purged modules, and their memory gets reused) is retired when the
// newer one came. When a module came and went is exact where note() was told (the VM's
// register calls, caught by the walker); else it is the refresh that first saw the change.
// Not thread-safe: refresh(), note() and lookup() must not run concurrently. The pointers in a
// JitHit stay valid until the next refresh() or note().
class JitCodeIndex {
public:
    // `never_unlinks`: the release only ever prepends to the list (OTP 25, 26), so the list
    // below the head a walk starts from cannot change, and a walk stops at the first entry the
    // last walk started with.
    // `clock`: CLOCK_MONOTONIC ns (the walker's clock) when null; tests give their own.
    using Clock = uint64_t (*)();
    JitCodeIndex(const RemoteMemory& mem, uint64_t descriptor_addr, bool never_unlinks, Clock clock = nullptr);
    ~JitCodeIndex();
    JitCodeIndex(JitCodeIndex&&) noexcept;
    JitCodeIndex& operator=(JitCodeIndex&&) noexcept;

    struct RefreshResult {
        size_t added = 0, retired = 0;
        bool ok = true;  // false: the list could not be walked consistently
        std::string error;
    };
    RefreshResult refresh(uint64_t now_ns);
    // The exact instant of a (un)registration, for the module it names (now or at the refresh
    // that finds it).
    void note(const JitCodeEvent& e);

    // `addr` as found in a sample taken at `sample_ns` (CLOCK_MONOTONIC).
    std::optional<JitHit> lookup(uint64_t addr, uint64_t sample_ns) const;

    const std::optional<JitEmulator>& emulator() const;
    // Every live range by address, with its module: what a perf map of the VM lists now.
    struct LiveRange {
        uint64_t base;  // the module's
        const JitModule* module;
        const JitRange* range;
    };
    std::vector<LiveRange> live_ranges() const;
    size_t module_count() const;  // live modules
    size_t range_count() const;   // live ranges
    uint64_t generation() const;  // bumps whenever refresh() changed anything

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace bb
