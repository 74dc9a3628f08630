// The DWARF reader: the struct offsets of a VM build, read from its debug information (the
// binary's own, or its separate debug file, found by build-id). Everything read is the target's:
// corrupt or hostile DWARF must fail with a reason, never loop or crash.
#include "target/offsets_dwarf.hpp"

#include "base/unique_fd.hpp"
#include "target/debug_file.hpp"
#include "target/elf_file.hpp"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <set>
#include <string_view>
#include <vector>

namespace bb {
namespace {

// The field list (include/bb_vm_fields.h) as DWARF spells it: a type, and a member path in it.
struct Field {
    uint32_t VmOffsets::*member;
    const char* type;  // "struct process" or a typedef name, as DWARF names it
    const char* path;  // dotted member path, "" for the type's size
};

constexpr Field fields[] = {
#define BB_FIELD_ENTRY(field, type, member) {&VmOffsets::field, type, member},
    BB_VM_FIELDS(BB_FIELD_ENTRY)
#undef BB_FIELD_ENTRY
};

struct ElfCloser {
    void operator()(Elf* e) const { elf_end(e); }
};
struct DwarfCloser {
    void operator()(Dwarf* d) const { dwarf_end(d); }
};

// An ELF file opened for libdw. Members are destroyed in reverse: Dwarf, Elf, then fd.
struct DwarfFile {
    UniqueFd fd;
    std::unique_ptr<Elf, ElfCloser> elf;
    std::unique_ptr<Dwarf, DwarfCloser> dwarf;
};

// Opens `path` and its DWARF.
Result<DwarfFile> open_dwarf(const std::string& path) {
    elf_version(EV_CURRENT);
    DwarfFile f;
    f.fd.reset(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!f.fd) return Fail{path + ": " + std::strerror(errno)};
    // Read, not mapped: the file may be the target's, and a target that truncates its own
    // executable while we read would turn a mapped read into SIGBUS (issue 20).
    f.elf.reset(elf_begin(f.fd.get(), ELF_C_READ, nullptr));
    if (!f.elf || elf_kind(f.elf.get()) != ELF_K_ELF) return Fail{path + ": not an ELF file"};
    f.dwarf.reset(dwarf_begin_elf(f.elf.get(), DWARF_C_READ, nullptr));
    if (!f.dwarf) return Fail{path + ": " + dwarf_errmsg(-1)};
    return f;
}

bool is_declaration(Dwarf_Die* die) {
    Dwarf_Attribute a;
    bool flag = false;
    return dwarf_attr(die, DW_AT_declaration, &a) && dwarf_formflag(&a, &flag) == 0 && flag;
}

// The DIE's DW_AT_type, or false when it has none.
bool type_of(Dwarf_Die* die, Dwarf_Die* out) {
    Dwarf_Attribute a;
    return dwarf_attr_integrate(die, DW_AT_type, &a) && dwarf_formref_die(&a, out);
}

// Follows typedefs and qualifiers to the type that has the layout.
bool underlying(Dwarf_Die* type, Dwarf_Die* out) {
    *out = *type;
    for (int depth = 0; depth < 32; depth++) {
        switch (dwarf_tag(out)) {
        case DW_TAG_typedef:
        case DW_TAG_const_type:
        case DW_TAG_volatile_type:
        case DW_TAG_restrict_type:
        case DW_TAG_atomic_type:
            if (!type_of(out, out)) return false;
            break;
        default: return true;
        }
    }
    return false;  // a loop: corrupt DWARF
}

bool is_aggregate(Dwarf_Die* die) {
    int tag = dwarf_tag(die);
    return tag == DW_TAG_structure_type || tag == DW_TAG_union_type;
}

// DW_AT_data_member_location: a constant from GCC and Clang; DW_OP_plus_uconst from old
// (DWARF 2) compilers. Union members have none and sit at 0.
bool member_offset(Dwarf_Die* member, uint64_t* off) {
    Dwarf_Attribute a;
    if (!dwarf_attr(member, DW_AT_data_member_location, &a)) {
        *off = 0;
        return true;
    }
    Dwarf_Word w;
    switch (dwarf_whatform(&a)) {
    case DW_FORM_data1:
    case DW_FORM_data2:
    case DW_FORM_data4:
    case DW_FORM_data8:
    case DW_FORM_udata:
    case DW_FORM_sdata:
    case DW_FORM_implicit_const:
        if (dwarf_formudata(&a, &w) != 0) return false;
        *off = w;
        return true;
    default: {
        Dwarf_Op* ops;
        size_t n;
        if (dwarf_getlocation(&a, &ops, &n) != 0 || n != 1 || ops[0].atom != DW_OP_plus_uconst) return false;
        *off = ops[0].number;
        return true;
    }
    }
}

// What one member search may visit: DWARF from a target's file can make anonymous members
// refer back to their own aggregate, or fan out (16 levels of 1,000 anonymous members each
// are 10^48 paths without a visited set). Each aggregate is looked through once, and at most
// kMaxDies members are looked at.
struct MemberSearch {
    static constexpr int kMaxDies = 100'000;
    std::set<Dwarf_Off> seen;
    int dies = 0;
};

// Finds member `name` of the aggregate `agg`, looking through anonymous structs and unions,
// and adds its offset to *off. *member_die is the member.
bool find_member(Dwarf_Die* agg, std::string_view name, uint64_t* off, Dwarf_Die* member_die, MemberSearch& search,
                 int depth = 0) {
    Dwarf_Die child;
    if (depth > 16 || !search.seen.insert(dwarf_dieoffset(agg)).second || dwarf_child(agg, &child) != 0) return false;
    do {
        if (++search.dies > MemberSearch::kMaxDies) return false;
        if (dwarf_tag(&child) != DW_TAG_member) continue;
        const char* n = dwarf_diename(&child);
        uint64_t here;
        if (n && name == n) {
            if (!member_offset(&child, &here)) return false;
            *off += here;
            *member_die = child;
            return true;
        }
        Dwarf_Die type, inner;
        if (!n && type_of(&child, &type) && underlying(&type, &inner) && is_aggregate(&inner) &&
            member_offset(&child, &here)) {
            uint64_t nested = *off + here;
            if (find_member(&inner, name, &nested, member_die, search, depth + 1)) {
                *off = nested;
                return true;
            }
        }
    } while (dwarf_siblingof(&child, &child) == 0);
    return false;
}

// Offset of a dotted member path ("r.o.tab") from the start of the aggregate.
std::optional<uint64_t> path_offset(Dwarf_Die agg, std::string_view path) {
    uint64_t off = 0;
    while (true) {
        size_t dot = path.find('.');
        Dwarf_Die member, type;
        MemberSearch search;
        if (!find_member(&agg, path.substr(0, dot), &off, &member, search)) return std::nullopt;
        if (dot == std::string_view::npos) return off;
        if (!type_of(&member, &type) || !underlying(&type, &agg) || !is_aggregate(&agg)) return std::nullopt;
        path = path.substr(dot + 1);
    }
}

// A type the VM's struct layout is read from, and the fields read from it.
struct Wanted {
    int tag;  // DW_TAG_structure_type or DW_TAG_typedef
    std::string name;
    const char* what;  // for messages: the type as the field list spells it
    std::vector<const Field*> fields;
    bool found = false;
};

// One Wanted per type of the field list, in first-use order.
std::vector<Wanted> wanted_types() {
    std::vector<Wanted> out;
    for (const Field& f : fields) {
        auto it = std::find_if(out.begin(), out.end(),
                               [&](const Wanted& w) { return w.what == std::string_view(f.type); });
        if (it == out.end()) {
            std::string_view t = f.type;
            bool is_struct = t.starts_with("struct ");
            out.push_back({is_struct ? DW_TAG_structure_type : DW_TAG_typedef,
                           std::string(is_struct ? t.substr(7) : t),
                           f.type,
                           {}});
            it = out.end() - 1;
        }
        it->fields.push_back(&f);
    }
    return out;
}

// Fills in `w` from the definition `die` if it is a complete one; false if it is not.
bool take(Wanted& w, Dwarf_Die* die, VmOffsets& o, std::vector<std::string>& missing) {
    Dwarf_Die agg;
    if (!underlying(die, &agg) || !is_aggregate(&agg) || is_declaration(&agg)) return false;
    for (const Field* f : w.fields) {
        if (*f->path == 0) {
            Dwarf_Word size = dwarf_bytesize(&agg);
            if (size == Dwarf_Word(-1) || size == 0 || size > UINT32_MAX)
                missing.push_back(std::string("size of ") + w.what);
            else o.*f->member = uint32_t(size);
            continue;
        }
        // "a.b|c": the first of the paths the build has (a member renamed between releases).
        std::optional<uint64_t> off;
        for (std::string_view paths = f->path; !off;) {
            size_t bar = paths.find('|');
            off = path_offset(agg, paths.substr(0, bar));
            if (bar == std::string_view::npos) break;
            paths.remove_prefix(bar + 1);
        }
        if (!off || *off > UINT32_MAX) missing.push_back(std::string(w.what) + " member " + f->path);
        else o.*f->member = uint32_t(*off);
    }
    return true;
}

// Visits the top-level DIEs of a unit and of the (dwz) partial units it imports.
template <class F>
void for_each_top_level(Dwarf_Die* unit, F&& visit, std::set<Dwarf_Off>& seen_imports) {
    Dwarf_Die die;
    if (dwarf_child(unit, &die) != 0) return;
    do {
        if (dwarf_tag(&die) == DW_TAG_imported_unit) {
            Dwarf_Attribute a;
            Dwarf_Die imported;
            if (dwarf_attr(&die, DW_AT_import, &a) && dwarf_formref_die(&a, &imported) &&
                seen_imports.insert(dwarf_dieoffset(&imported)).second)
                for_each_top_level(&imported, visit, seen_imports);
            continue;
        }
        if (!visit(&die)) return;
    } while (dwarf_siblingof(&die, &die) == 0);
}

Result<VmOffsets> read_offsets(Dwarf* dw) {
    std::vector<Wanted> wanted = wanted_types();
    VmOffsets o;
    std::vector<std::string> missing;
    size_t left = wanted.size();
    std::set<Dwarf_Off> seen_imports;

    // Types sit at the top level of C compile units; only those are looked at, which also
    // keeps C++ namespaced types of the same name out.
    auto visit = [&](Dwarf_Die* die) {
        int tag = dwarf_tag(die);
        if (tag != DW_TAG_structure_type && tag != DW_TAG_typedef) return true;
        const char* name = dwarf_diename(die);
        if (!name) return true;
        for (Wanted& w : wanted)
            if (!w.found && w.tag == tag && w.name == name && take(w, die, o, missing)) {
                w.found = true;
                left--;
            }
        return left > 0;
    };
    Dwarf_Off off = 0, next;
    size_t header_size;
    while (left > 0 && dwarf_nextcu(dw, off, &next, &header_size, nullptr, nullptr, nullptr) == 0) {
        Dwarf_Die cu;
        if (dwarf_offdie(dw, off + header_size, &cu)) for_each_top_level(&cu, visit, seen_imports);
        off = next;
    }
    for (const Wanted& w : wanted)
        if (!w.found) missing.push_back(std::string("definition of ") + w.what);
    if (!missing.empty()) {
        std::string list;
        for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
        return Fail{"missing in DWARF: " + list};
    }
    return o;
}

}  // namespace

Result<VmOffsets> offsets_from_dwarf(const std::string& elf_path) {
    auto elf = ElfFile::open(elf_path);
    if (!elf) return Fail{elf.error()};
    const std::string build_id = elf->build_id();

    auto file = open_dwarf(elf_path);
    std::string source = elf_path;
    if (!file) {
        // A stripped binary: its DWARF may be installed separately, found by build-id.
        auto d = find_debug_file(build_id);
        if (!d)
            return Fail{elf_path + " has no usable DWARF, and no separate debug file was found (" + d.error() + ")"};
        source = d->path;
        file = open_dwarf(source);
        if (!file)
            return Fail{elf_path + " has no usable DWARF, nor has its separate debug file (" + file.error() + ")"};
    }
    auto o = read_offsets(file->dwarf.get());
    if (!o) return Fail{source + ": " + o.error()};
    o->build_id = build_id;
    o->origin = "DWARF of " + source;
    return o;
}

}  // namespace bb
