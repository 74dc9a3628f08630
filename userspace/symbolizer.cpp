#include "symbolizer.hpp"

#include <fmt/format.h>

namespace bb {

uint32_t NameTable::intern(const std::string& s, bool erlang) {
    auto [it, added] = ids_.try_emplace(s, static_cast<uint32_t>(names_.size()));
    if (added) {
        names_.push_back(s);
        erlang_.push_back(erlang);
    }
    return it->second;
}

Symbolizer::Symbolizer(const Vm& vm, FrameOptions opt)
    : vm_(vm), opt_(opt), jit_(vm.mem(), vm.symbol_address("__jit_debug_descriptor")), native_(vm.pid()) {
    unknown_jit_ = names_.intern("[unknown JIT code]");
    kernel_ = names_.intern("[kernel]");
    no_process_ = names_.intern("[no Erlang process]");
    bad_process_ = names_.intern("[unreadable Erlang process]");
    unknown_native_ = names_.intern("[unknown native code]");
    refresh(0);
}

void Symbolizer::refresh(uint64_t now_ns) {
    now_ns_ = now_ns;
    // Walking the module list costs a read per module (thousands on big systems): once a
    // second catches purges, and misses catch new code.
    if (now_ns == 0 || now_ns - last_refresh_ns_ >= 1000000000ull) reread_jit(now_ns);
}

void Symbolizer::reread_jit(uint64_t now_ns) {
    last_refresh_ns_ = now_ns;
    jit_.refresh(now_ns);
    if (jit_.generation() != jit_generation_) {
        jit_generation_ = jit_.generation();
        cp_cache_.clear();
        leaf_cache_.clear();
    }
}

uint32_t Symbolizer::erlang_frame(uint64_t addr, uint64_t t, bool return_address) {
    auto& cache = return_address ? cp_cache_ : leaf_cache_;
    // A cached name is only valid if the code at addr has not changed since: the cache is
    // dropped whenever the index changes, and code only changes through the index.
    if (auto it = cache.find(addr); it != cache.end()) return it->second;
    // A return address may sit just past its call's function: look up the call itself.
    auto hit = jit_.lookup(return_address ? addr - 1 : addr, t);
    if (!hit && now_ns_ - last_refresh_ns_ >= 100000000ull) {
        // Code loaded since the last walk of the module list, most likely.
        reread_jit(now_ns_);
        hit = jit_.lookup(return_address ? addr - 1 : addr, t);
    }
    if (!hit) {
        unsymbolized_++;
        return unknown_jit_;
    }
    std::string name = hit->range->name;
    if (opt_.lines && hit->line && hit->file) name += fmt::format(" ({}:{})", *hit->file, hit->line);
    // The JIT's shared code ("global::i_test_yield_shared") and module headers
    // ("lists::codeHeader") are JIT code, but not Erlang functions.
    uint32_t id = names_.intern(name, hit->range->name.find("::") == std::string::npos);
    cache.emplace(addr, id);
    return id;
}

std::optional<uint32_t> Symbolizer::native_frame(uint64_t ip) {
    if (auto it = native_cache_.find(ip); it != native_cache_.end()) return it->second;
    if (auto r = native_ranges_.upper_bound(ip); r != native_ranges_.begin()) {
        --r;
        if (ip < r->second.first) {
            native_cache_.emplace(ip, r->second.second);
            return r->second.second;
        }
    }
    if (native_misses_.count(ip)) return std::nullopt;
    auto sym = native_.lookup(ip);
    if (!sym && now_ns_ - last_native_refresh_ns_ >= 1000000000ull) {
        // Maybe a NIF library loaded since we last looked. Re-reading every mapping is
        // costly: at most once a second, and misses are remembered until then.
        last_native_refresh_ns_ = now_ns_;
        native_.refresh();
        native_misses_.clear();
        sym = native_.lookup(ip);
    }
    std::string name;
    if (sym && !sym->name.empty())
        name = sym->name;
    else if (sym)
        name = fmt::format("[{}]", sym->module);
    else {
        native_misses_.insert(ip);
        return std::nullopt;
    }
    uint32_t id = names_.intern(name);
    native_cache_.emplace(ip, id);
    if (sym && !sym->name.empty() && sym->size) native_ranges_[ip - sym->offset] = {ip - sym->offset + sym->size, id};
    return id;
}

void Symbolizer::frames(const bb_record& r, std::vector<uint32_t>& out) {
    out.clear();
    uint64_t normal_exit = emulator() ? emulator()->normal_exit : 0;
    for (int i = static_cast<int>(r.nframes) - 1; i >= 0; i--) {
        if (r.frames[i] == normal_exit) continue;  // bottom of every stack: not a caller
        out.push_back(erlang_frame(r.frames[i], r.time_ns, true));
    }
    if (r.where == BB_WHERE_JIT) {
        uint32_t leaf = erlang_frame(r.ip, r.time_ns, false);
        if (!opt_.only_erlang || names_.is_erlang(leaf)) out.push_back(leaf);
    } else if (!opt_.only_erlang) {
        if (!(r.flags & BB_F_PROC))
            out.insert(out.begin(), (r.flags & BB_F_BAD_PROC) ? bad_process_ : no_process_);
        if (auto id = native_frame(r.ip)) {
            out.push_back(*id);
        } else {
            unsymbolized_++;
            out.push_back(unknown_native_);
        }
    }
    if ((r.flags & BB_F_KERNEL) && !opt_.only_erlang) out.push_back(kernel_);
    if (opt_.only_erlang && !(r.flags & BB_F_PROC)) out.clear();
}

}  // namespace bb
