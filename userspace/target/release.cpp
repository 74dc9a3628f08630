#include "target/release.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <vector>

namespace bb {
namespace {

// Tags of the system version string that say nothing about struct layouts: the rest do
// ([lock-counting], [lock-checking], [debug-compiled], [dtrace], [systemtap], [lttng],
// [valgrind-compiled], [address-sanitizer], [type-assertions], ...), so an unknown tag is
// taken as one that may move fields, never ignored.
bool layout_neutral(std::string_view tag) {
    for (std::string_view p : {"source", "64-bit", "32-bit", "smp:", "ds:", "async-threads:", "jit", "frame-pointer",
                               "instruction-counting", "sharing-preserving", "kernel-poll", "hipe"})
        if (tag.starts_with(p)) return true;
    return false;
}

constexpr std::string_view kPrefix = "Erlang/OTP ";

// Parses one candidate: `s` starts at "Erlang/OTP " and ends before the string's NUL.
std::optional<VmBuild> parse_version_string(std::string_view s) {
    VmBuild b;
    b.version_string = std::string(s);
    s.remove_prefix(kPrefix.size());
    size_t n = 0;
    while (n < s.size() && n < 3 && std::isdigit(static_cast<unsigned char>(s[n]))) n++;
    if (n == 0 || std::from_chars(s.data(), s.data() + n, b.otp_release).ec != std::errc()) return std::nullopt;
    s.remove_prefix(n);
    if (!s.starts_with("%s [erts-")) return std::nullopt;
    s.remove_prefix(3);
    b.flavor = "emu";
    std::vector<std::string> features;
    while (!s.empty()) {
        if (std::isspace(static_cast<unsigned char>(s.front()))) {
            s.remove_prefix(1);
            continue;
        }
        if (s.front() != '[') return std::nullopt;
        size_t close = s.find(']');
        if (close == std::string_view::npos) return std::nullopt;
        std::string_view tag = s.substr(1, close - 1);
        s.remove_prefix(close + 1);
        if (tag.starts_with("erts-")) {
            b.erts_version = std::string(tag.substr(5));
        } else if (tag.starts_with("jit")) {
            b.flavor = "jit";
            b.native_stack = tag.starts_with("jit:ns");
        } else if (tag == "64-bit") {
            b.bits64 = true;
        } else if (!layout_neutral(tag)) {
            features.emplace_back(tag);
        }
    }
    if (b.erts_version.empty()) return std::nullopt;
    std::sort(features.begin(), features.end());
    for (const auto& f : features) b.features += (b.features.empty() ? "" : ",") + f;
    return b;
}

constexpr ThreadNaming kOldNormal{"", "_scheduler"}, kOldDirtyCpu{"", "_dirty_cpu_scheduler"},
    kOldDirtyIo{"", "_dirty_io_scheduler"};
constexpr ThreadNaming kNewNormal{"erts_sched_", ""}, kNewDirtyCpu{"erts_dcpus_", ""}, kNewDirtyIo{"erts_dios_", ""};

// Releases 26 and 28 are written from their sources (struct process in erl_process.h, thread
// names in erl_process.c, pids in erl_term.h, atoms in atom.h, the JIT's gdb interface in
// beam_jit_metadata.cpp); see docs/releases.md. OTP 27 reordered struct process (heap moved
// from 128 to 192): 26 still has 25's order, 28 and 29 have 27's. 29 is built and tested here
// (scripts/build-test-vms.sh 29), its table read from its DWARF.
constexpr PidLayout kPids28{28, 15, false}, kPids60{60, 28, true};

// Every way into garbage_collect() (erl_gc.c; read in OTP 25's and 27's source, the same in
// 26, 28 and 29): the JIT's heap test, BIFs and the emulator's helpers, after a BIF that built
// heap fragments, hibernation, literal-area collection; dirty GCs go through
// erts_garbage_collect_nobump too.
constexpr std::string_view kGcEntries[] = {"erts_garbage_collect_nobump",    "erts_garbage_collect",
                                           "erts_gc_after_bif_call_lhf",     "erts_gc_after_bif_call",
                                           "erts_garbage_collect_hibernate", "erts_garbage_collect_literals"};

// Adding a release is one row here (and its offsets table in offsets/, docs/releases.md "Adding a release").
// clang-format off
constexpr std::array<OtpRelease, 5> kReleases{{
    {.major = 25, .support = Support::Tested,
     .normal = kOldNormal, .dirty_cpu = kOldDirtyCpu, .dirty_io = kOldDirtyIo, .pids = kPids28,
     .atom_text = AtomText::bytes, .terms = kTerms25, .jit_unregisters = false, .layout_from = 25,
     .gc_entry_points = kGcEntries},
    {.major = 26, .support = Support::Described,
     .normal = kNewNormal, .dirty_cpu = kNewDirtyCpu, .dirty_io = kNewDirtyIo, .pids = kPids60,
     .atom_text = AtomText::bytes, .terms = kTerms25, .jit_unregisters = false, .layout_from = 25,
     .gc_entry_points = kGcEntries},
    {.major = 27, .support = Support::Tested,
     .normal = kNewNormal, .dirty_cpu = kNewDirtyCpu, .dirty_io = kNewDirtyIo, .pids = kPids60,
     .atom_text = AtomText::bytes, .terms = kTerms27, .jit_unregisters = true, .layout_from = 27,
     .gc_entry_points = kGcEntries},
    {.major = 28, .support = Support::Described,
     .normal = kNewNormal, .dirty_cpu = kNewDirtyCpu, .dirty_io = kNewDirtyIo, .pids = kPids60,
     .atom_text = AtomText::binary, .terms = kTerms27, .jit_unregisters = true, .layout_from = 27,
     .gc_entry_points = kGcEntries},
    {.major = 29, .support = Support::Tested,
     .normal = kNewNormal, .dirty_cpu = kNewDirtyCpu, .dirty_io = kNewDirtyIo, .pids = kPids60,
     .atom_text = AtomText::binary, .terms = kTerms29, .jit_unregisters = true, .layout_from = 29,
     .gc_entry_points = kGcEntries},
}};
// clang-format on

}  // namespace

std::string VmBuild::describe() const {
    std::string s = fmt::format("OTP {} (erts-{}, {}", otp_release, erts_version, flavor);
    if (!features.empty()) s += ", " + features;
    return s + ")";
}

std::optional<VmBuild> read_vm_build(std::span<const char> bytes) {
    std::string_view all(bytes.data(), bytes.size());
    for (size_t at = all.find(kPrefix); at != std::string_view::npos; at = all.find(kPrefix, at + 1)) {
        size_t end = all.find('\0', at);
        if (end == std::string_view::npos) end = all.size();
        if (end - at > 1024) continue;  // no such string is that long: not it
        if (auto b = parse_version_string(all.substr(at, end - at))) return b;
    }
    return std::nullopt;
}

std::optional<VmBuild> read_vm_build_fd(int fd, uint64_t max_bytes) {
    // A string is at most 1,024 bytes (read_vm_build): a chunk keeps the unterminated tail of the
    // one before, so a string split between two reads is still found whole.
    constexpr size_t kChunk = 1u << 20, kLongest = 1025;
    std::vector<char> buf;
    uint64_t offset = 0;
    while (offset < max_bytes) {
        size_t keep = buf.size();
        buf.resize(keep + std::min<uint64_t>(kChunk, max_bytes - offset));
        ssize_t n;
        do n = pread(fd, buf.data() + keep, buf.size() - keep, static_cast<off_t>(offset));
        while (n < 0 && errno == EINTR);
        if (n < 0) return std::nullopt;
        buf.resize(keep + static_cast<size_t>(n));
        offset += static_cast<uint64_t>(n);
        const bool end = n == 0 || offset >= max_bytes;
        // Strings ending in this buffer; the tail after its last NUL waits for the next read.
        size_t cut = end ? buf.size() : 0;
        for (size_t i = buf.size(); !end && i > 0; i--)
            if (buf[i - 1] == '\0') {
                cut = i;
                break;
            }
        if (auto b = read_vm_build(std::span(buf.data(), cut))) return b;
        if (end) return std::nullopt;
        size_t from = std::max(cut, buf.size() > kLongest ? buf.size() - kLongest : 0);
        buf.erase(buf.begin(), buf.begin() + static_cast<std::ptrdiff_t>(from));
    }
    return std::nullopt;
}

std::optional<VmBuild> read_vm_build_file(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    auto b = read_vm_build_fd(fd, kMaxVersionScanBytes);
    ::close(fd);
    return b;
}

int ThreadNaming::number(std::string_view name) const {
    if (!name.starts_with(prefix)) return 0;
    name.remove_prefix(prefix.size());
    int n = 0;
    auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), n);
    if (ec != std::errc() || n <= 0) return 0;
    std::string_view rest(p, name.data() + name.size() - p);
    if (suffix.empty()) return rest.empty() ? n : 0;
    // Cut to 15 characters: what is left of the suffix must still say which kind it is.
    if (rest.size() < std::min<size_t>(4, suffix.size()) || !suffix.starts_with(rest)) return 0;
    return n;
}

std::string PidLayout::format(uint64_t term, const Pix& pix) const {
    const uint64_t data_mask = data_bits >= 64 ? ~0ull : (1ull << data_bits) - 1;
    uint64_t data = (term >> 4) & data_mask;
    if (pixdata) {  // erts_ptab_pixdata2data()
        uint64_t pd = data;
        data = pd & ~pix.mask;
        data |= (pd >> (pix.cl_shift & 63)) & pix.cl_mask;
        data |= (pd & pix.cli_mask) << (pix.cli_shift & 63);
        data &= data_mask;
    }
    return fmt::format("<0.{}.{}>", data & ((1ull << num_bits) - 1), data >> num_bits);
}

std::optional<uint64_t> PidLayout::parse(std::string_view text, const Pix& pix) const {
    unsigned long long node = 0, num = 0, ser = 0;
    int used = -1;
    std::string s(text);
    if (sscanf(s.c_str(), "<%llu.%llu.%llu>%n", &node, &num, &ser, &used) != 3 || used != int(s.size()) || node != 0 ||
        s.find('-') != std::string::npos || num >= (1ull << num_bits) || ser >= (1ull << (data_bits - num_bits)))
        return std::nullopt;
    uint64_t data = ser << num_bits | num;
    if (pixdata) {  // erts_ptab_data2pixdata()
        uint64_t ix = (data & pix.cl_mask) << (pix.cl_shift & 63);
        ix += (data >> (pix.cli_shift & 63)) & pix.cli_mask;
        data = (data & ~pix.mask) | ix;
    }
    return data << 4 | 0x3;
}

const OtpRelease* find_release(int major) {
    for (const auto& r : kReleases)
        if (r.major == major) return &r;
    return nullptr;
}

std::span<const OtpRelease> known_releases() { return kReleases; }

std::string supported_range() {
    auto [lo, hi] = std::minmax_element(kReleases.begin(), kReleases.end(),
                                        [](const OtpRelease& a, const OtpRelease& b) { return a.major < b.major; });
    return fmt::format("OTP {} to {}", lo->major, hi->major);
}

}  // namespace bb
