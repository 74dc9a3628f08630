#include "native/cfi_bounds.hpp"

#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fmt/format.h>
#include <gelf.h>

namespace bb {

size_t eh_encoded_size(uint8_t enc) {
    if (enc == DW_EH_PE_omit) return 0;
    switch (enc & 0x0f) {
    case DW_EH_PE_absptr: return 8;
    case DW_EH_PE_udata2:
    case DW_EH_PE_sdata2: return 2;
    case DW_EH_PE_udata4:
    case DW_EH_PE_sdata4: return 4;
    case DW_EH_PE_udata8:
    case DW_EH_PE_sdata8: return 8;
    default: return 0;  // LEB128 or garbage
    }
}

namespace {

struct Reader {
    const uint8_t* p;
    const uint8_t* end;
    bool ok = true;

    uint64_t uleb() {
        uint64_t v = 0;
        for (unsigned shift = 0; p < end; shift += 7) {
            uint8_t b = *p++;
            if (shift < 64) v |= uint64_t{b & 0x7fu} << shift;
            if (!(b & 0x80)) return v;
        }
        ok = false;
        return v;
    }
    void skip(size_t n) {
        if (static_cast<size_t>(end - p) < n) ok = false, p = end;
        else p += n;
    }
};

// What a CFI program costs libdw for each look-up that runs it: the frame state's size (the
// largest register named) and the copies of it (each DW_CFA_remember_state).
struct ProgramCost {
    uint64_t max_register = 0;
    uint64_t remembers = 0;
};

// Reads a CFI program as libdw's execute_cfi() does and as far: an unknown opcode or a
// truncated operand ends it there. `loc_size`: DW_CFA_set_loc's operand, the FDE encoding's
// size (0: one libdw reads as LEB128 or refuses).
ProgramCost cost_of(const uint8_t* program, const uint8_t* end, size_t loc_size) {
    Reader r{program, end};
    ProgramCost c;
    auto reg = [&](uint64_t n) { c.max_register = std::max(c.max_register, n); };
    while (r.ok && r.p < r.end) {
        const uint8_t op = *r.p++;
        switch (op & 0xc0) {
        case DW_CFA_advance_loc: continue;
        case DW_CFA_offset: reg(op & 0x3f), r.uleb(); continue;
        case DW_CFA_restore: reg(op & 0x3f); continue;
        }
        switch (op) {
        case DW_CFA_nop:
        case DW_CFA_restore_state: break;
        case DW_CFA_remember_state: c.remembers++; break;
        case DW_CFA_GNU_window_save: reg(31); break;  // SPARC's shorthand sizes the frame for 32
        case DW_CFA_advance_loc1: r.skip(1); break;
        case DW_CFA_advance_loc2: r.skip(2); break;
        case DW_CFA_advance_loc4: r.skip(4); break;
        case DW_CFA_MIPS_advance_loc8: r.skip(8); break;
        case DW_CFA_set_loc:
            if (loc_size) r.skip(loc_size);
            else r.uleb();
            break;
        case DW_CFA_def_cfa:
        case DW_CFA_def_cfa_sf: r.uleb(), r.uleb(); break;  // the CFA's register is no frame slot
        case DW_CFA_def_cfa_register:
        case DW_CFA_def_cfa_offset:
        case DW_CFA_def_cfa_offset_sf:
        case DW_CFA_GNU_args_size: r.uleb(); break;
        case DW_CFA_def_cfa_expression: r.skip(r.uleb()); break;
        case DW_CFA_undefined:
        case DW_CFA_same_value:
        case DW_CFA_restore_extended: reg(r.uleb()); break;
        case DW_CFA_offset_extended:
        case DW_CFA_offset_extended_sf:
        case DW_CFA_GNU_negative_offset_extended:
        case DW_CFA_val_offset:
        case DW_CFA_val_offset_sf: reg(r.uleb()), r.uleb(); break;
        case DW_CFA_register: reg(r.uleb()), r.uleb(); break;
        case DW_CFA_expression:
        case DW_CFA_val_expression: reg(r.uleb()), r.skip(r.uleb()); break;
        default: return c;  // libdw stops here: the program is invalid
        }
    }
    return c;
}

// What FDEs of a CIE need to find their program (libdw's intern_new_cie and intern_fde).
struct CieShape {
    bool sized = false;  // 'z': an augmentation length precedes each FDE's program
    uint8_t fde_encoding = DW_EH_PE_absptr;
};

CieShape shape_of(const Dwarf_CIE& cie) {
    CieShape s;
    const char* ap = cie.augmentation;
    if (ap[0] == 'e' && ap[1] == 'h') ap += 2;
    if (*ap != 'z') return s;
    s.sized = true;
    Reader r{cie.augmentation_data, cie.augmentation_data + cie.augmentation_data_size};
    for (ap++; *ap && r.ok && r.p < r.end; ap++) {
        if (*ap == 'L') r.skip(1);
        else if (*ap == 'R') s.fde_encoding = *r.p++;
        else if (*ap == 'P') {
            uint8_t enc = *r.p++;
            r.skip(eh_encoded_size(enc));
        } else if (*ap != 'S' && *ap != 'B') break;
    }
    return s;
}

std::optional<uint64_t> read_pointer(const uint8_t* p, size_t n, uint8_t enc, uint64_t field_vaddr,
                                     uint64_t data_vaddr) {
    const size_t size = eh_encoded_size(enc);
    if (size == 0 || size > n) return std::nullopt;
    uint64_t v = 0;
    std::memcpy(&v, p, size);
    if ((enc & 0x08) && size < 8 && (v >> (size * 8 - 1)) & 1) v |= ~uint64_t{0} << (size * 8);  // signed
    switch (enc & 0x70) {
    case DW_EH_PE_absptr: return v;
    case DW_EH_PE_pcrel: return field_vaddr + v;
    case DW_EH_PE_datarel: return data_vaddr + v;
    default: return std::nullopt;
    }
}

struct EhFrame {
    Elf_Data* data;
    uint64_t vaddr;
};

// The data dwarf_getcfi_elf() would interpret: every .eh_frame section (libdw takes one of
// them), or, without section headers, what PT_GNU_EH_FRAME points at, to the end of the file.
std::vector<EhFrame> eh_frames(Elf* elf, std::string& error) {
    std::vector<EhFrame> out;
    size_t shstrndx = 0;
    if (elf_getshdrstrndx(elf, &shstrndx) != 0) return out;  // libdw reads no CFI either
    if (shstrndx != 0) {
        for (Elf_Scn* scn = nullptr; (scn = elf_nextscn(elf, scn));) {
            GElf_Shdr sh;
            const char* name = gelf_getshdr(scn, &sh) ? elf_strptr(elf, shstrndx, sh.sh_name) : nullptr;
            if (name && std::strcmp(name, ".eh_frame") == 0 && sh.sh_type != SHT_NOBITS)
                if (Elf_Data* d = elf_rawdata(scn, nullptr); d && d->d_buf) out.push_back({d, sh.sh_addr});
        }
        if (!out.empty()) return out;
    }
    size_t nphdr = 0;
    if (elf_getphdrnum(elf, &nphdr) != 0) return out;
    for (size_t i = 0; i < nphdr; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(elf, static_cast<int>(i), &ph)) return out;
        if (ph.p_type != PT_GNU_EH_FRAME) continue;
        Elf_Data* hdr = elf_getdata_rawchunk(elf, static_cast<int64_t>(ph.p_offset), ph.p_filesz, ELF_T_BYTE);
        size_t file_size = 0;
        if (!hdr || !hdr->d_buf || hdr->d_size < 4 || !elf_rawfile(elf, &file_size)) return out;
        const auto* h = static_cast<const uint8_t*>(hdr->d_buf);
        auto ptr = read_pointer(h + 4, hdr->d_size - 4, h[1], ph.p_vaddr + 4, ph.p_vaddr);
        if (!ptr) {
            error = fmt::format(".eh_frame_hdr's pointer to .eh_frame of an unsupported encoding {:#x}", h[1]);
            return out;
        }
        const uint64_t offset = *ptr - ph.p_vaddr + ph.p_offset;
        if (offset < file_size)
            if (Elf_Data* d = elf_getdata_rawchunk(elf, static_cast<int64_t>(offset), file_size - offset, ELF_T_BYTE))
                out.push_back({d, *ptr});
        return out;
    }
    return out;
}

// The entries of one .eh_frame that libdw may run, checked once each.
class EntryCheck {
public:
    EntryCheck(const unsigned char* ident, Elf_Data* data) : ident_(ident), data_(data) {}

    // The entry at `off` and, for an FDE, its CIE: "" if libdw may run them, else why not.
    // `next`: where the entry after it starts, -1 at the end.
    std::string check(Dwarf_Off off, Dwarf_Off* next = nullptr, bool cie_only = false) {
        Dwarf_Off after = 0;
        Dwarf_CFI_Entry e;
        if (next) *next = static_cast<Dwarf_Off>(-1);
        if (dwarf_next_cfi(ident_, data_, true, off, &after, &e) != 0) return "";  // libdw fails there too
        if (next) *next = after;
        if ((cie_only && !dwarf_cfi_cie_p(&e)) || !checked_.insert(off).second) return "";
        ProgramCost c;
        if (dwarf_cfi_cie_p(&e)) {
            CieShape s = shape_of(e.cie);
            cies_[off] = s;
            c = cost_of(e.cie.initial_instructions, e.cie.initial_instructions_end, eh_encoded_size(s.fde_encoding));
            c.max_register = std::max<uint64_t>(c.max_register, e.cie.return_address_register);
        } else {
            auto cie = cies_.find(e.fde.CIE_pointer);
            if (cie == cies_.end()) {
                if (std::string why = check(e.fde.CIE_pointer, nullptr, true); !why.empty()) return why;
                cie = cies_.find(e.fde.CIE_pointer);
                if (cie == cies_.end()) return "";  // no CIE there: libdw fails the FDE
            }
            const CieShape& s = cie->second;
            const size_t loc = eh_encoded_size(s.fde_encoding);
            if (loc == 0) return fmt::format("an FDE address encoding it cannot check ({:#x})", s.fde_encoding);
            Reader r{e.fde.start, e.fde.end};
            r.skip(2 * loc);
            if (s.sized) r.skip(r.uleb());
            if (!r.ok) return "";
            c = cost_of(r.p, r.end, loc);
        }
        if (c.max_register > kMaxCfiRegister)
            return fmt::format("its unwind information names register {} (x86-64 has fewer than {})", c.max_register,
                               kMaxCfiRegister + 1);
        if (c.remembers > kMaxCfiRemembers)
            return fmt::format("an unwind program saves its state {} times (at most {} are read)", c.remembers,
                               kMaxCfiRemembers);
        return "";
    }

private:
    const unsigned char* ident_;
    Elf_Data* data_;
    std::map<Dwarf_Off, CieShape> cies_;
    std::set<Dwarf_Off> checked_;
};

}  // namespace

std::string cfi_out_of_bounds(Elf* elf, const std::vector<uint64_t>& fdes) {
    std::string error;
    const auto* ident = reinterpret_cast<const unsigned char*>(elf_getident(elf, nullptr));
    if (!ident) return "";
    for (const EhFrame& f : eh_frames(elf, error)) {
        EntryCheck entries(ident, f.data);
        // What a linear search reads: entry after entry, each moving forward (libdw checks
        // its length), to the terminator or the first invalid one.
        for (Dwarf_Off off = 0, next = 0; off != static_cast<Dwarf_Off>(-1); off = next)
            if (std::string why = entries.check(off, &next); !why.empty()) return why;
        // What the .eh_frame_hdr table points at, anywhere in the data.
        for (uint64_t fde : fdes)
            if (fde >= f.vaddr && fde - f.vaddr < f.data->d_size)
                if (std::string why = entries.check(fde - f.vaddr); !why.empty()) return why;
    }
    return error;
}

}  // namespace bb
