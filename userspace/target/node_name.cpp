#include "target/node_name.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "target/elf_file.hpp"
#include "target/proc_maps.hpp"
#include "target/remote_memory.hpp"
#include "target/target_file.hpp"

namespace bb {

std::optional<std::string> parse_node_name(std::string_view buffer) {
    buffer = buffer.substr(0, kNodeNameBuffer);
    size_t nul = buffer.find('\0');
    if (nul == std::string_view::npos || nul == 0) return std::nullopt;
    std::string_view text = buffer.substr(0, nul);
    std::string name;
    if (text.front() == '\'') {
        // A quoted atom: '...' with \ escaping the next byte ("%T" writes \' and \\).
        if (text.size() < 3 || text.back() != '\'') return std::nullopt;
        for (size_t i = 1; i + 1 < text.size(); i++) {
            if (text[i] == '\\') {
                if (++i + 1 >= text.size()) return std::nullopt;
            } else if (text[i] == '\'') {
                return std::nullopt;
            }
            name += text[i];
        }
    } else {
        name = text;
    }
    if (std::count(name.begin(), name.end(), '@') != 1 || name.front() == '@' || name.back() == '@')
        return std::nullopt;
    for (unsigned char c : name)
        if (c < 0x20 || c >= 0x7f) return std::nullopt;
    return name == "nonode@nohost" ? "" : name;
}

namespace {

// The writable part of a VM's binary (.data, .bss) is about 0.3 MiB on OTP 25 to 29: a binary
// claiming more is not read past this.
constexpr uint64_t kMaxScanBytes = 16ull << 20;

std::optional<std::string> read_name(const RemoteMemory& mem, uint64_t at) {
    std::string a(kNodeNameBuffer, '\0'), b(kNodeNameBuffer, '\0');
    if (!mem.read(at, std::as_writable_bytes(std::span(a.data(), a.size())))) return std::nullopt;
    if (!mem.read(at, std::as_writable_bytes(std::span(b.data(), b.size())))) return std::nullopt;
    if (a != b) return std::nullopt;  // being written: the next call reads it again
    return parse_node_name(a);
}

// The one pointer in the binary's initialized writable data that points at a node name in its
// writable data: erts_this_node_sysname, once erts_set_this_node has run (before, it points at
// a constant, "uninitialized yet").
Result<uint64_t> scan_for_buffer(const RemoteMemory& mem, const ElfFile& elf, uint64_t bias) {
    struct Range {
        uint64_t start, end, init_end;
        std::vector<std::byte> bytes;
    };
    std::vector<Range> ranges;
    uint64_t total = 0;
    for (const ElfSegment& g : elf.segments()) {
        if (!g.writable) continue;
        // The file's own sizes: bounded before anything is added or read, filesz within memsz.
        if (g.memsz > kMaxScanBytes - total)
            return Fail{fmt::format("its writable data is over {} MiB", kMaxScanBytes >> 20)};
        total += g.memsz;
        auto bytes = mem.read_bytes(g.vaddr + bias, g.memsz);
        if (!bytes) return Fail{"its data cannot be read"};
        const uint64_t start = g.vaddr + bias;
        ranges.push_back({start, start + g.memsz, start + std::min(g.filesz, g.memsz), std::move(*bytes)});
    }
    auto text_at = [&](uint64_t v) -> std::optional<std::string> {
        for (const Range& r : ranges)
            if (v >= r.start && v < r.end && r.end - v >= kNodeNameBuffer)  // no v + 256 that wraps
                return parse_node_name(
                    std::string_view(reinterpret_cast<const char*>(r.bytes.data()) + (v - r.start), kNodeNameBuffer));
        return std::nullopt;
    };
    std::set<uint64_t> found;
    for (const Range& r : ranges)
        for (uint64_t at = (r.start + 7) & ~7ull; at + 8 <= r.init_end; at += 8) {
            uint64_t v;
            std::memcpy(&v, r.bytes.data() + (at - r.start), 8);
            if (text_at(v)) found.insert(v);
            if (found.size() > 1) return Fail{"several pointers in its data point at a node name"};
        }
    if (found.empty()) return Fail{"no pointer in its data points at a node name (still booting?)"};
    return *found.begin();
}

}  // namespace

Result<uint64_t> find_node_name(pid_t pid) {
    auto exe = exe_mapping(pid, read_maps(pid));
    if (!exe) return Fail{"its executable's mapping was not found"};
    auto file = open_mapped_file(pid, *exe);
    if (!file) return Fail{file.error()};
    auto elf = ElfFile::open(file->fd.get(), file->name);
    if (!elf) return Fail{elf.error()};
    const uint64_t bias = exe->start - elf->first_load_vaddr();
    if (auto s = elf->find("erts_this_node_sysname_BUFFER")) return s->value + bias;
    return scan_for_buffer(RemoteMemory(pid), *elf, bias);
}

std::optional<std::string> node_name_in_memory(pid_t pid, uint64_t start_time) {
    using Clock = std::chrono::steady_clock;
    struct Found {
        std::optional<uint64_t> at;  // nullopt: not found, at `when`
        Clock::time_point when;
    };
    // Per VM (a pid is reused): where its name is, or when it was last looked for in vain (a
    // booting VM has it a moment later; another user's VM never, so not every call looks).
    static std::mutex lock;
    static std::map<std::pair<pid_t, uint64_t>, Found> known;
    const auto key = std::make_pair(pid, start_time);
    const auto now = Clock::now();
    std::optional<uint64_t> at;
    {
        std::lock_guard g(lock);
        if (auto it = known.find(key); it != known.end()) {
            if (!it->second.at && now - it->second.when < std::chrono::seconds(2)) return std::nullopt;
            at = it->second.at;
        }
    }
    if (!at) {
        auto found = find_node_name(pid);
        std::lock_guard g(lock);
        if (known.size() >= 4096) known.clear();  // bounded by the VMs a host runs, not by its history
        known[key] = {found ? std::optional<uint64_t>(*found) : std::nullopt, now};
        if (!found) return std::nullopt;
        at = *found;
    }
    return read_name(RemoteMemory(pid), *at);
}

bool node_matches(const std::string& node, std::string given) {
    if (node.empty()) return false;
    if (given.size() >= 2 && given.front() == '\'' && given.back() == '\'') given = given.substr(1, given.size() - 2);
    if (given == node) return true;
    auto short_name = [](const std::string& n) { return n.substr(0, n.find('@')); };
    const bool node_full = node.find('@') != std::string::npos, given_full = given.find('@') != std::string::npos;
    // "shop" names shop@vm; "shop@vm" names a VM whose command line says only -sname shop.
    if (node_full && !given_full) return short_name(node) == given;
    if (!node_full && given_full) return short_name(given) == node;
    return false;
}

}  // namespace bb
