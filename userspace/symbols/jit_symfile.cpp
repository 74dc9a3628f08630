// The symfiles of the GDB JIT interface as the BEAM writes them
// (erts/emulator/beam/jit/beam_jit_metadata.cpp, OTP 25): not object files but the VM's own
// packed struct debug_info. Their bytes are the target's, untrusted: every count and length is
// checked against the bytes actually read.
#include "symbols/jit_symfile.hpp"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>
#include <unordered_map>

namespace bb {

namespace {

// struct debug_info: u32 header (0 emulator, 1 module), then an 8-aligned union.
constexpr uint32_t kKindEmulator = 0, kKindModule = 1;
// struct module_info at +8: u64 base_address, u32 range_count, u32 code_size, u16 name_length,
// char name[] at +26. The VM advances by sizeof(debug_info) (32) + name_length, so the first
// range_info sits at 32 + name_length.
constexpr size_t kModuleBase = 8, kModuleRangeCount = 16, kModuleCodeSize = 20, kModuleNameLen = 24, kModuleName = 26,
                 kModuleHeaderSize = 32;
// struct range_info: u32 start_offset, u32 end_offset, u32 line_count, u16 name_length,
// char name[] at +14; sizeof is 16, so the next record is at 16 + name_length.
constexpr size_t kRangeNameLen = 12, kRangeName = 14, kRangeSize = 16;
// struct line_info: u32 start_offset, u32 line_number, u16 file_length, char file[] at +10;
// sizeof is 12, so the next record is at 12 + file_length.
constexpr size_t kLineFileLen = 8, kLineFile = 10, kLineSize = 12;
// struct emulator_info at +8: int frame_layout, then const void* normal_exit at +16.
constexpr size_t kEmuFrameLayout = 8, kEmuNormalExit = 16, kEmuSize = 24;

constexpr std::string_view kPrologueSuffix = "-CodeInfoPrologue";

template <class T>
std::optional<T> load(std::span<const std::byte> b, size_t off) {
    if (off > b.size() || b.size() - off < sizeof(T)) return std::nullopt;
    T v;
    std::memcpy(&v, b.data() + off, sizeof(T));
    return v;
}

// A name field: `len` bytes at `off` including the VM's NUL terminator, which must be there
// (a missing one means we are not looking at what the VM wrote). The name is a view of `b`.
Result<std::string_view> read_name(std::span<const std::byte> b, size_t off, size_t len, const std::string& what) {
    std::string problem;
    if (len == 0) problem = " has length 0";
    else if (off > b.size() || b.size() - off < len) problem = " runs past the end";
    else if (static_cast<char>(b[off + len - 1]) != '\0') problem = " is not NUL-terminated";
    if (!problem.empty()) return Fail{what + problem + " (offset " + std::to_string(off) + ")"};
    auto chars = reinterpret_cast<const char*>(b.data() + off);
    return std::string_view(chars, strnlen(chars, len));
}

// Both symfile kinds open with a u32 kind and a fixed-size header: why `b` is not one of kind
// `want`, nullopt when it is.
std::optional<Fail> check_header(std::span<const std::byte> b, uint32_t want, size_t header_size, const char* what) {
    auto kind = load<uint32_t>(b, 0);
    if (!kind || b.size() < header_size) return Fail{std::string(what) + " symfile shorter than its header"};
    if (*kind != want)
        return Fail{std::string("not ") + (what[0] == 'e' ? "an " : "a ") + what + " symfile (kind " +
                    std::to_string(*kind) + ")"};
    return std::nullopt;
}

}  // namespace

bool is_emulator_symfile(std::span<const std::byte> b) {
    auto kind = load<uint32_t>(b, 0);
    return kind && *kind == kKindEmulator;
}

Result<JitSymfile> parse_module_symfile(std::span<const std::byte> b) {
    if (auto bad = check_header(b, kKindModule, kModuleHeaderSize, "module")) return std::move(*bad);

    JitSymfile out;
    JitModule& m = out.module;
    out.base = *load<uint64_t>(b, kModuleBase);
    uint32_t range_count = *load<uint32_t>(b, kModuleRangeCount);
    m.code_size = *load<uint32_t>(b, kModuleCodeSize);
    uint16_t name_len = *load<uint16_t>(b, kModuleNameLen);
    if (out.base + m.code_size < out.base) return Fail{"module code wraps around"};
    auto name = read_name(b, kModuleName, name_len, "module name");
    if (!name) return Fail{name.error()};
    m.name = *name;

    size_t pos = kModuleHeaderSize + name_len;
    if (pos > b.size()) return Fail{"module name runs past the end"};
    // Each range takes at least kRangeSize + 1 bytes: a count beyond that is garbage, and it is
    // never used to size anything before this check.
    if (range_count > (b.size() - pos) / (kRangeSize + 1))
        return Fail{"range count " + std::to_string(range_count) + " exceeds the symfile"};
    m.ranges.reserve(range_count);
    std::unordered_map<std::string, uint32_t> file_index;  // m.files, by name
    std::string file;

    for (uint32_t i = 0; i < range_count; i++) {
        auto start_off = load<uint32_t>(b, pos), end_off = load<uint32_t>(b, pos + 4),
             line_count = load<uint32_t>(b, pos + 8);
        auto rname_len = load<uint16_t>(b, pos + kRangeNameLen);
        if (!rname_len) return Fail{"range " + std::to_string(i) + " truncated"};
        JitRange r;
        auto rname = read_name(b, pos + kRangeName, *rname_len, "range name");
        if (!rname) return Fail{rname.error()};
        r.name = *rname;
        pos += kRangeSize + *rname_len;
        if (pos > b.size()) return Fail{"range " + std::to_string(i) + " truncated"};
        // The VM names a function's CodeInfo + prologue separately for perf's disassembly; to a
        // profile it is part of the function.
        if (r.name.ends_with(kPrologueSuffix)) {
            r.name.resize(r.name.size() - kPrologueSuffix.size());
            r.prologue = true;
        }

        if (*line_count > (b.size() - pos) / (kLineSize + 1))
            return Fail{"line count " + std::to_string(*line_count) + " exceeds the symfile"};
        r.lines.reserve(*line_count);
        for (uint32_t j = 0; j < *line_count; j++) {
            auto lstart = load<uint32_t>(b, pos), line = load<uint32_t>(b, pos + 4);
            auto file_len = load<uint16_t>(b, pos + kLineFileLen);
            if (!file_len) return Fail{"line record truncated"};
            JitLine l;
            auto file_name = read_name(b, pos + kLineFile, *file_len, "line file name");
            if (!file_name) return Fail{file_name.error()};
            file.assign(*file_name);
            auto [it, added] = file_index.try_emplace(file, static_cast<uint32_t>(m.files.size()));
            if (added) m.files.push_back(file);
            l.file = it->second;
            pos += kLineSize + *file_len;
            if (pos > b.size()) return Fail{"line record truncated"};
            // Dropped, not rejected: a line outside the module's code cannot describe any address
            // we will look up, and the rest of the record is still well-formed.
            if (*lstart > m.code_size) continue;
            l.start = *lstart;
            l.line = *line;
            r.lines.push_back(std::move(l));
        }
        std::stable_sort(r.lines.begin(), r.lines.end(),
                         [](const JitLine& a, const JitLine& c) { return a.start < c.start; });

        // Inverted, empty and out-of-code ranges are dropped, not rejected: the symfile's
        // structure checked out, so its other ranges are still worth having. (The VM emits
        // empty ranges, e.g. a module's codeFooter when nothing follows the last function.)
        if (*start_off >= *end_off || *end_off > m.code_size) continue;
        r.start = *start_off;
        r.end = *end_off;
        m.ranges.push_back(std::move(r));
    }
    // The VM computes symfile_size as exactly what it writes: leftovers mean a layout we do not
    // know (another OTP version) or bytes that are not a symfile.
    if (pos != b.size()) return Fail{std::to_string(b.size() - pos) + " trailing bytes after the last range"};

    // The VM writes ranges in address order; sort anyway, then drop any range that overlaps the
    // one kept before it, so that lookups can binary-search.
    std::stable_sort(m.ranges.begin(), m.ranges.end(),
                     [](const JitRange& a, const JitRange& c) { return a.start < c.start; });
    std::vector<JitRange> kept;
    kept.reserve(m.ranges.size());
    for (auto& r : m.ranges)
        if (kept.empty() || r.start >= kept.back().end) kept.push_back(std::move(r));
    m.ranges = std::move(kept);
    return out;
}

Result<JitEmulator> parse_emulator_symfile(std::span<const std::byte> b) {
    if (auto bad = check_header(b, kKindEmulator, kEmuSize, "emulator")) return std::move(*bad);
    JitEmulator e;
    e.frame_layout = *load<int32_t>(b, kEmuFrameLayout);
    e.normal_exit = *load<uint64_t>(b, kEmuNormalExit);
    if (e.frame_layout != 0 && e.frame_layout != 1)
        return Fail{"unknown frame layout " + std::to_string(e.frame_layout)};
    if (e.normal_exit == 0) return Fail{"normal-exit address is null"};
    return e;
}

}  // namespace bb
