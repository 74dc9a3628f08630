// The offset table text format (format_table, parse_table) and the tables compiled in.
#include "target/offsets.hpp"

#include <cctype>
#include <charconv>
#include <cstring>
#include <set>
#include <span>
#include <vector>

namespace bb::detail {
// Defined in the generated offsets_builtin.cpp (scripts/embed_offsets.cmake): the file name and
// text of every userspace/target/offsets/*.txt.
std::span<const std::pair<std::string_view, std::string_view>> builtin_tables();
}  // namespace bb::detail

namespace bb {
namespace {

struct Field {
    const char* key;
    uint32_t VmOffsets::*member;
};

// Table order is the field list's. Keys are the member names, so a table reads like the struct.
constexpr Field fields[] = {
#define BB_FIELD_ENTRY(field, type, member) {#field, &VmOffsets::field},
    BB_VM_FIELDS(BB_FIELD_ENTRY)
#undef BB_FIELD_ENTRY
};

bool is_build_id(std::string_view s) {
    if (s.empty() || s.size() % 2 != 0) return false;
    for (char c : s)
        if (!std::isxdigit(static_cast<unsigned char>(c)) || std::isupper(static_cast<unsigned char>(c))) return false;
    return true;
}

// "25", "27": a whole number, as ERLANG_OTP_RELEASE is.
bool is_release(std::string_view s) {
    if (s.empty() || s.size() > 3) return false;
    for (char c : s)
        if (!std::isdigit(static_cast<unsigned char>(c))) return false;
    return true;
}

// "-", or comma-separated words of [a-z0-9-] (the VM's own tags: "lock-counting,dtrace").
bool is_feature_list(std::string_view s) {
    if (s == "-") return true;
    if (s.empty() || s.front() == ',' || s.back() == ',' || s.find(",,") != std::string_view::npos) return false;
    for (char c : s)
        if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '-' ||
              c == ','))
            return false;
    return true;
}

std::string lower(std::string_view s) {
    std::string r(s);
    for (char& c : r) c = char(std::tolower(static_cast<unsigned char>(c)));
    return r;
}

// Splits a line into whitespace-separated words.
std::vector<std::string_view> words(std::string_view line) {
    std::vector<std::string_view> out;
    size_t i = 0;
    while (i < line.size()) {
        while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) i++;
        size_t start = i;
        while (i < line.size() && !std::isspace(static_cast<unsigned char>(line[i]))) i++;
        if (i > start) out.push_back(line.substr(start, i - start));
    }
    return out;
}

}  // namespace

bb_vm_layout VmOffsets::layout() const {
    bb_vm_layout l{};
#define BB_LAYOUT_COPY(field, type, member) l.field = field;
    BB_VM_FIELDS(BB_LAYOUT_COPY)
#undef BB_LAYOUT_COPY
    return l;
}

bool VmOffsets::layout_equal(const bb_vm_layout& a, const bb_vm_layout& b) {
    return std::memcmp(&a, &b, sizeof a) == 0;  // all __u32: no padding
}

std::string format_table(const VmOffsets& o) {
    std::string s;
    if (!o.origin.empty()) s += "# from " + o.origin + "\n";
    s += "otp_release " + o.otp_release + "\n";
    s += "features " + (o.features.empty() ? std::string("-") : o.features) + "\n";
    if (!o.build_id.empty()) s += "build_id " + o.build_id + "\n";
    for (const Field& f : fields) s += std::string(f.key) + " " + std::to_string(o.*f.member) + "\n";
    return s;
}

Result<VmOffsets> parse_table(std::string_view text) {
    VmOffsets o;
    std::set<std::string_view> seen;
    int line_no = 0;
    auto fail = [&](const std::string& why) { return Fail{"line " + std::to_string(line_no) + ": " + why}; };
    while (!text.empty()) {
        line_no++;
        size_t eol = text.find('\n');
        std::string_view line = text.substr(0, eol);
        text = eol == std::string_view::npos ? std::string_view{} : text.substr(eol + 1);

        auto w = words(line);
        if (w.empty() || w[0].front() == '#') continue;
        if (w.size() != 2) return fail("expected \"key value\"");
        auto [key, value] = std::pair(w[0], w[1]);
        if (seen.empty() && key != "otp_release") return fail("the first key must be otp_release");
        if (!seen.insert(key).second) return fail("duplicate key " + std::string(key));
        if (key == "otp_release") {
            if (!is_release(value)) return fail("bad otp_release " + std::string(value));
            o.otp_release = value;
            continue;
        }
        if (key == "features") {
            if (!is_feature_list(value)) return fail("bad features " + std::string(value));
            o.features = value == "-" ? std::string() : std::string(value);
            continue;
        }
        if (key == "build_id") {
            if (!is_build_id(value)) return fail("bad build_id " + std::string(value));
            o.build_id = value;
            continue;
        }
        const Field* f = nullptr;
        for (const Field& c : fields)
            if (key == c.key) f = &c;
        if (!f) return fail("unknown key " + std::string(key));
        uint32_t v;
        auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v, 10);
        if (ec != std::errc() || end != value.data() + value.size())
            return fail("bad number for " + std::string(key) + ": " + std::string(value));
        o.*f->member = v;
    }
    for (const char* key : {"otp_release", "features"})
        if (!seen.count(key)) return Fail{std::string("missing key ") + key};
    for (const Field& f : fields)
        if (!seen.count(f.key)) return Fail{std::string("missing key ") + f.key};
    return o;
}

const std::vector<VmOffsets>& builtin_tables() {
    static const std::vector<VmOffsets> tables = [] {
        std::vector<VmOffsets> out;
        for (const auto& [name, text] : detail::builtin_tables()) {
            // The unit tests check every shipped table; a bad one is left out here rather than
            // taking the tools down.
            if (auto o = parse_table(text)) {
                o->origin = "built-in table " + std::string(name);
                out.push_back(std::move(*o));
            }
        }
        return out;
    }();
    return tables;
}

std::optional<VmOffsets> builtin_offsets(std::string_view otp_release, std::string_view features,
                                         std::string_view build_id) {
    const std::string id = lower(build_id);
    const VmOffsets* by_release = nullptr;
    for (const VmOffsets& t : builtin_tables()) {
        if (t.otp_release != otp_release || t.features != features) continue;
        if (!id.empty() && t.build_id == id) return t;
        if (!by_release) by_release = &t;
    }
    if (by_release) return *by_release;
    return std::nullopt;
}

}  // namespace bb
