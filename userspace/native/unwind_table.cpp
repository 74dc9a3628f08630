#include "native/unwind_table.hpp"

#include "native/cfi_bounds.hpp"
#include "native/unwind_store.hpp"
#include "base/test_hooks.hpp"
#include "base/unique_fd.hpp"
#include "target/proc_maps.hpp"
#include "target/target_file.hpp"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

namespace bb {

namespace {

// x86-64 DWARF register numbers.
constexpr int kRbp = 6, kRsp = 7, kReturnAddress = 16;
// However garbled a file, compiling it stops here: at this many rows, FDEs, or rules looked up
// (libdw's CFI interpreter, the work). Debian's OTP 25 beam.smp has 63,000 rows and libcrypto
// 37,000 (136,202 for all the files of that VM), so real files are far below.
constexpr size_t kMaxRowsPerFile = 1u << 20;
constexpr size_t kMaxFdesPerFile = 1u << 20;
constexpr size_t kMaxLookupsPerFile = 4u << 20;
constexpr size_t kMaxRowsPerFde = 1u << 16;

struct ElfCloser {
    void operator()(Elf* e) const { elf_end(e); }
};
struct CfiCloser {
    void operator()(Dwarf_CFI* c) const { dwarf_cfi_end(c); }
};

// The offset N of a "CFA + N" rule as libdw spells it (DW_OP_call_frame_cfa, then an addition).
std::optional<int64_t> cfa_plus(const Dwarf_Op* ops, size_t nops) {
    if (nops == 0 || ops[0].atom != DW_OP_call_frame_cfa) return std::nullopt;
    if (nops == 1) return 0;
    if (nops == 2 && ops[1].atom == DW_OP_plus_uconst) return static_cast<int64_t>(ops[1].number);
    if (nops == 3 && ops[1].atom == DW_OP_consts && ops[2].atom == DW_OP_plus)
        return static_cast<int64_t>(ops[1].number);
    return std::nullopt;
}

// The rules of one range, as the walker can follow them (or BB_CFA_BAD / BB_CFA_END).
bb_unwind_row row_of(Dwarf_Frame* frame) {
    bb_unwind_row row{};
    row.cfa_rule = BB_CFA_BAD;
    Dwarf_Op ops_mem[3];
    Dwarf_Op* ops = nullptr;
    size_t nops = 0;

    // The return address: at CFA - 8 as a call leaves it, or undefined at a thread's root.
    if (dwarf_frame_register(frame, kReturnAddress, ops_mem, &ops, &nops) != 0) return row;
    if (nops == 0 && ops) {
        row.cfa_rule = BB_CFA_END;
        return row;
    }
    if (auto off = cfa_plus(ops, nops); !off || *off != -8) return row;

    if (dwarf_frame_cfa(frame, &ops, &nops) != 0 || nops == 0) return row;
    // One expression is followed: the entry rsp kept in a stack slot, plus the return
    // address's word (DW_OP_breg7 N; DW_OP_deref; DW_OP_plus_uconst 8: OpenSSL's perlasm
    // `.cfi_cfa_expression %rsp+N,deref,+8`, in code that realigns its stack for AVX2; N is
    // negative where the slot is in the red zone, as in most of its SHA-256 AVX2 loop).
    const bool deref = nops == 3 && ops[0].atom == DW_OP_breg0 + kRsp && ops[1].atom == DW_OP_deref &&
                       ops[2].atom == DW_OP_plus_uconst && ops[2].number == 8;
    if (nops != 1 && !deref) return row;
    int reg;
    int64_t off;
    if (ops[0].atom == DW_OP_bregx) {
        reg = static_cast<int>(ops[0].number);
        off = static_cast<int64_t>(ops[0].number2);
    } else if (ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31) {
        reg = ops[0].atom - DW_OP_breg0;
        off = static_cast<int64_t>(ops[0].number);
    } else {
        return row;
    }
    if (reg != kRsp && reg != kRbp) return row;
    // The slot of a deref may be in the red zone below rsp: a signed word count.
    if (deref ? off % 8 || off / 8 < INT16_MIN || off / 8 > INT16_MAX : off < 0 || off % 8 || off / 8 > UINT16_MAX)
        return row;

    // The caller's rbp: unchanged, or saved in the frame. In another register: not followed.
    if (dwarf_frame_register(frame, kRbp, ops_mem, &ops, &nops) != 0) return row;
    int64_t slot = 0;
    if (nops != 0) {
        auto saved = cfa_plus(ops, nops);
        if (!saved || *saved >= 0 || *saved % 8 || *saved / 8 < INT8_MIN) return row;
        slot = *saved / 8;
    }
    row.cfa_rule = deref ? BB_CFA_RSP_DEREF : reg == kRsp ? BB_CFA_RSP : BB_CFA_RBP;
    row.cfa_words = deref ? static_cast<uint16_t>(static_cast<int16_t>(off / 8)) : static_cast<uint16_t>(off / 8);
    row.rbp_slot = static_cast<int8_t>(slot);
    return row;
}

// The rule of a lazily bound .plt, as ld writes it for every PLT entry: CFA = rsp + N + 8 past
// the K-th byte of the 16-byte entry (its `push $index` done), i.e. DW_OP_breg7 N; DW_OP_breg16 0;
// DW_OP_lit15; DW_OP_and; DW_OP_litK; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus. A sample in a
// PLT stub (a call to memcpy from a BIF, say) unwinds on through its caller.
struct PltRule {
    uint16_t words;  // N / 8
    unsigned k;
};

std::optional<PltRule> plt_rule(Dwarf_Frame* frame) {
    Dwarf_Op ops_mem[3];
    Dwarf_Op* ops = nullptr;
    size_t nops = 0;
    if (dwarf_frame_register(frame, kReturnAddress, ops_mem, &ops, &nops) != 0) return std::nullopt;
    if (auto off = cfa_plus(ops, nops); !off || *off != -8) return std::nullopt;
    if (dwarf_frame_register(frame, kRbp, ops_mem, &ops, &nops) != 0 || nops != 0) return std::nullopt;
    if (dwarf_frame_cfa(frame, &ops, &nops) != 0 || nops != 9) return std::nullopt;
    const bool shape = ops[0].atom == DW_OP_breg0 + kRsp && ops[1].atom == DW_OP_breg0 + kReturnAddress &&
                       ops[1].number == 0 && ops[2].atom == DW_OP_lit15 && ops[3].atom == DW_OP_and &&
                       ops[4].atom >= DW_OP_lit1 && ops[4].atom <= DW_OP_lit15 && ops[5].atom == DW_OP_ge &&
                       ops[6].atom == DW_OP_lit3 && ops[7].atom == DW_OP_shl && ops[8].atom == DW_OP_plus;
    const auto n = static_cast<int64_t>(ops[0].number);
    if (!shape || n <= 0 || n % 8 || n / 8 >= UINT16_MAX) return std::nullopt;
    return PltRule{static_cast<uint16_t>(n / 8), static_cast<unsigned>(ops[4].atom - DW_OP_lit0)};
}

bool same_rules(const bb_unwind_row& a, const bb_unwind_row& b) {
    return a.cfa_rule == b.cfa_rule && a.cfa_words == b.cfa_words && a.rbp_slot == b.rbp_slot;
}

// The start of every FDE, from the binary-search table of .eh_frame_hdr (PT_GNU_EH_FRAME);
// and where each FDE is, into `fdes`.
std::vector<uint64_t> fde_starts(Elf* elf, std::string& error, std::string& budget, std::vector<uint64_t>& fdes) {
    std::vector<uint64_t> starts;
    size_t nphdr = 0;
    if (elf_getphdrnum(elf, &nphdr) != 0) {
        error = "no program headers";
        return starts;
    }
    for (size_t i = 0; i < nphdr; i++) {
        GElf_Phdr ph;
        if (!gelf_getphdr(elf, static_cast<int>(i), &ph) || ph.p_type != PT_GNU_EH_FRAME) continue;
        // Read alone (libelf checks it lies in the file), not the whole file.
        Elf_Data* chunk = ph.p_filesz >= 4
                              ? elf_getdata_rawchunk(elf, static_cast<int64_t>(ph.p_offset), ph.p_filesz, ELF_T_BYTE)
                              : nullptr;
        if (!chunk || chunk->d_size < 4) {
            error = ".eh_frame_hdr outside the file";
            return starts;
        }
        const auto* hdr = static_cast<const uint8_t*>(chunk->d_buf);
        size_t n = chunk->d_size;
        uint8_t ptr_enc = hdr[1], count_enc = hdr[2], table_enc = hdr[3];
        size_t ptr_size = eh_encoded_size(ptr_enc), count_size = eh_encoded_size(count_enc);
        if (hdr[0] != 1 || count_size == 0 || (count_enc & 0x70) != DW_EH_PE_absptr ||
            table_enc != (DW_EH_PE_datarel | DW_EH_PE_sdata4)) {
            error = fmt::format(".eh_frame_hdr of an unsupported form (version {}, encodings {:#x} {:#x})", hdr[0],
                                count_enc, table_enc);
            return starts;
        }
        size_t at = 4 + ptr_size;
        if (at + count_size > n) {
            error = "truncated .eh_frame_hdr";
            return starts;
        }
        uint64_t count = 0;
        std::memcpy(&count, hdr + at, count_size);  // little-endian
        at += count_size;
        if (count > (n - at) / 8) {
            error = "truncated .eh_frame_hdr";
            count = (n - at) / 8;
        }
        if (count > kMaxFdesPerFile) {
            budget = fmt::format("{} FDEs, more than the {} read of a file", count, kMaxFdesPerFile);
            count = kMaxFdesPerFile;
        }
        starts.reserve(count);
        fdes.reserve(count);
        for (uint64_t k = 0; k < count; k++) {
            int32_t loc, fde;
            std::memcpy(&loc, hdr + at + k * 8, 4);
            std::memcpy(&fde, hdr + at + k * 8 + 4, 4);
            starts.push_back(ph.p_vaddr + static_cast<int64_t>(loc));
            fdes.push_back(ph.p_vaddr + static_cast<int64_t>(fde));
        }
        std::sort(starts.begin(), starts.end());
        starts.erase(std::unique(starts.begin(), starts.end()), starts.end());
        return starts;
    }
    error = "no .eh_frame_hdr";
    return starts;
}

UnwindTable compile(Elf* elf) {
    UnwindTable t;
    GElf_Ehdr eh;
    if (!elf || elf_kind(elf) != ELF_K_ELF || !gelf_getehdr(elf, &eh)) {
        t.error = "not an ELF file";
        return t;
    }
    if (eh.e_machine != EM_X86_64) {
        t.error = "not x86-64";
        return t;
    }
    // The executable segments, for the load bias of each mapping of the file.
    size_t nphdr = 0;
    if (elf_getphdrnum(elf, &nphdr) == 0)
        for (size_t i = 0; i < nphdr; i++) {
            GElf_Phdr ph;
            if (gelf_getphdr(elf, static_cast<int>(i), &ph) && ph.p_type == PT_LOAD && (ph.p_flags & PF_X))
                t.exec_segments.push_back({ph.p_offset, ph.p_filesz, ph.p_vaddr});
        }
    std::vector<uint64_t> fdes;
    std::vector<uint64_t> starts = fde_starts(elf, t.error, t.budget, fdes);
    if (starts.empty()) {
        if (t.error.empty()) t.error = "no FDEs";
        return t;
    }
    if (std::string why = cfi_out_of_bounds(elf, fdes); !why.empty()) {
        t.error = why;
        return t;
    }
    std::unique_ptr<Dwarf_CFI, CfiCloser> cfi(dwarf_getcfi_elf(elf));
    if (!cfi) {
        t.error = fmt::format("no .eh_frame: {}", dwarf_errmsg(-1));
        return t;
    }
    if (starts.back() > UINT32_MAX) {
        t.error = "code above 4 GiB";
        return t;
    }
    auto add = [&](uint64_t pc, bb_unwind_row row) {
        row.pc = static_cast<uint32_t>(pc);
        if (!t.rows.empty() && t.rows.back().pc == row.pc) t.rows.pop_back();  // an empty range
        if (t.rows.empty() || !same_rules(t.rows.back(), row)) t.rows.push_back(row);
    };
    size_t lookups = 0;
    for (size_t i = 0; i < starts.size(); i++) {
        if (t.rows.size() >= kMaxRowsPerFile || lookups >= kMaxLookupsPerFile) {
            t.budget =
                fmt::format("{} rows from {} rule look-ups, the budget of a file; {} of its {} functions left out",
                            t.rows.size(), lookups, starts.size() - i, starts.size());
            break;
        }
        uint64_t next = i + 1 < starts.size() ? starts[i + 1] : UINT32_MAX;
        uint64_t addr = starts[i];
        for (size_t k = 0; addr < next && k < kMaxRowsPerFde; k++, lookups++) {
            Dwarf_Frame* frame = nullptr;
            if (dwarf_cfi_addrframe(cfi.get(), addr, &frame) != 0) break;
            Dwarf_Addr lo = 0, hi = 0;
            bool signal = false;
            dwarf_frame_info(frame, &lo, &hi, &signal);
            bb_unwind_row row = row_of(frame);
            auto plt = row.cfa_rule == BB_CFA_BAD ? plt_rule(frame) : std::nullopt;
            std::free(frame);
            if (hi <= addr || lo > addr) break;  // garbage: the range must move on
            // A range past the next FDE is garbage too: rows must stay sorted across FDEs.
            hi = std::min<uint64_t>(hi, next);
            if (plt) {
                // Two rows per entry: before and after its push. No more than an FDE's rows.
                const uint64_t end = std::min<uint64_t>(hi, addr + kMaxRowsPerFde / 2 * 16);
                for (uint64_t pc = addr; pc < end && t.rows.size() < kMaxRowsPerFile;) {
                    bool pushed = (pc & 15) >= plt->k;
                    bb_unwind_row r{};
                    r.cfa_rule = BB_CFA_RSP;
                    r.cfa_words = static_cast<uint16_t>(plt->words + pushed);
                    add(pc, r);
                    pc = (pc & ~uint64_t{15}) + (pushed ? 16 : plt->k);
                }
                if (end < hi) {  // a .plt larger than any real one: the rest gets no row
                    addr = end;
                    break;
                }
            } else {
                if (row.cfa_rule == BB_CFA_BAD) t.bad_rows++;
                add(addr, row);
            }
            addr = hi;
        }
        if (addr > starts[i]) t.functions.emplace_back(starts[i], addr);
        // Up to the next FDE, no row: an unwind that lands there stops.
        if (addr < next) add(addr, bb_unwind_row{});
    }
    if (!t.rows.empty()) {
        uint64_t lo = t.rows.front().pc, span = t.rows.back().pc - lo;
        t.buckets.reserve(span / BB_UNWIND_BUCKET + 1);
        size_t r = 0;
        for (uint64_t b = 0; b <= span / BB_UNWIND_BUCKET; b++) {
            uint64_t at = lo + b * BB_UNWIND_BUCKET;
            while (r + 1 < t.rows.size() && t.rows[r + 1].pc <= at) r++;
            t.buckets.push_back(static_cast<uint32_t>(r));
        }
    }
    return t;
}

}  // namespace

std::optional<std::pair<uint64_t, uint64_t>> UnwindTable::function_at(uint64_t pc) const {
    auto it = std::upper_bound(functions.begin(), functions.end(), pc,
                               [](uint64_t v, const auto& f) { return v < f.first; });
    if (it == functions.begin()) return std::nullopt;
    --it;
    if (pc >= it->second) return std::nullopt;
    return *it;
}

UnwindTable compile_unwind_table(const void* bytes, size_t size) {
    elf_version(EV_CURRENT);
    // elf_memory() may convert the image in place: it gets a copy.
    std::vector<char> image(static_cast<const char*>(bytes), static_cast<const char*>(bytes) + size);
    std::unique_ptr<Elf, ElfCloser> elf(elf_memory(image.data(), image.size()));
    return compile(elf.get());
}

UnwindTable compile_unwind_table(int fd) {
    elf_version(EV_CURRENT);
    // ELF_C_READ: libelf reads what is asked for with pread. A mapping (ELF_C_READ_MMAP) of a
    // file the target truncates would fault (SIGBUS) where a read just comes up short.
    std::unique_ptr<Elf, ElfCloser> elf(elf_begin(fd, ELF_C_READ, nullptr));
    return compile(elf.get());
}

UnwindTable compile_unwind_table(const std::string& path) {
    UniqueFd fd(open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    struct stat st;
    if (!fd || fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
        UnwindTable t;
        t.error = fd ? "not a regular file" : fmt::format("cannot open: {}", std::strerror(errno));
        return t;
    }
    return compile_unwind_table(fd.get());
}

namespace {

// Executable mappings of files, a library deleted while mapped included (a hot upgrade of a
// NIF library leaves the old one so). Not the JIT's code (/memfd:vmem): it has no .eh_frame.
std::vector<Mapping> exec_mappings(pid_t pid) {
    std::vector<Mapping> out;
    for (auto& m : read_maps(pid))
        if (m.executable() && m.inode != 0 && m.path.starts_with("/") && !m.path.starts_with("/memfd:"))
            out.push_back(std::move(m));
    return out;
}

// Runtime minus link-time address for the mapping of `file_offset` at `start`: from the PT_LOAD
// that holds that offset. nullopt when none does.
std::optional<uint64_t> bias_of(const UnwindTable& t, uint64_t start, uint64_t file_offset) {
    for (const auto& s : t.exec_segments)
        if (file_offset >= (s.offset & ~0xfffull) && file_offset < s.offset + s.filesz)
            return start - file_offset - (s.vaddr - s.offset);
    return std::nullopt;
}

}  // namespace

NativeUnwind::NativeUnwind(pid_t pid, std::shared_ptr<UnwindStore> store) : pid_(pid), store_(std::move(store)) {
    elf_version(EV_CURRENT);
    refresh();
}

// The regions go before the store they point into (store_ is declared first).
NativeUnwind::~NativeUnwind() = default;

void NativeUnwind::budget_spent(const std::string& why) {
    if (budget_spent_) return;
    budget_spent_ = true;
    skipped_.push_back(why);
}

size_t NativeUnwind::refresh() {
    size_t added = 0;
    for (const auto& m : exec_mappings(pid_)) {
        bool known = false;
        for (const auto& k : modules_) known |= k.start == m.start && k.end == m.end;
        if (known) continue;
        const std::string path = m.deleted() ? m.path.substr(0, m.path.size() - 10) : m.path;
        const std::string name = path.substr(path.rfind('/') + 1);
        if (modules_.size() >= BB_MAX_UNWIND_MODULES) {
            budget_spent(fmt::format("{} and any other file mapped past {} of them: the walker's limit of files", name,
                                     BB_MAX_UNWIND_MODULES));
            continue;
        }
        // One table per file, however many mappings and names it has: by device and inode.
        const std::pair<dev_t, ino_t> file_key{makedev(m.dev_major, m.dev_minor), m.inode};
        auto& table = tables_[file_key];
        if (!table) {
            if (tables_.size() > kMaxFiles || rows_compiled_ >= kMaxRowsCompiled) {
                budget_spent(
                    fmt::format("{} and any other file past {} files or {} rows compiled: the unwind "
                                "budget of a run",
                                name, kMaxFiles, kMaxRowsCompiled));
                tables_.erase(file_key);
                continue;
            }
            // The inode the mapping maps, never what its path names now (target/target_file.hpp);
            // compiled once for every VM that maps that same inode, unchanged (unwind_store.hpp).
            auto file = open_mapped_file(pid_, m);
            auto id = file ? file_id(file->fd.get()) : std::nullopt;
            if (file && id) {
                table = store_->table(*id, [&] { return compile_unwind_table(file->fd.get()); });
            } else {
                UnwindTable t;
                t.error = file ? "cannot stat it" : file.error();
                table = std::make_shared<const UnwindTable>(std::move(t));
            }
            rows_compiled_ += table->rows.size();
            if (!table->error.empty()) skipped_.push_back(fmt::format("{}: {}", name, table->error));
            if (!table->budget.empty()) skipped_.push_back(fmt::format("part of {}: {}", name, table->budget));
        }
        auto bias = bias_of(*table, m.start, m.offset);
        if (table->rows.empty() || !bias) continue;
        // BB_INJECT_UNWIND_GARBAGE=1 (tests only): rows whose rules match nothing in the code, so
        // the walker follows garbage CFAs and reads garbage return addresses. It must flag
        // and stop, never crash or loop (tests/integration/native_test.cpp). The garbage is this
        // VM's own: placed by its content, it shares no region with the true rows.
        if (test_hooks::unwind_garbage()) {
            auto g = std::make_shared<UnwindTable>(*table);
            std::mt19937 rng(static_cast<uint32_t>(g->rows.size()));
            for (auto& r : g->rows) {
                r.cfa_rule = static_cast<uint8_t>(rng() % 5);
                r.cfa_words = static_cast<uint16_t>(rng());
                r.rbp_slot = static_cast<int8_t>(rng());
            }
            table = g;
        }
        auto region = store_->place(table);
        if (!region) {
            skipped_.push_back(fmt::format("{}: {}", name, region.error()));
            continue;
        }
        const UnwindRegion& r = **region;
        modules_.push_back(bb_unwind_module{m.start, m.end, *bias, r.first_row, r.nrows, r.first_bucket, r.nbuckets,
                                            table->rows.front().pc, 0});
        if (placed_.insert(region->get()).second) {
            rows_ += r.nrows;
            buckets_ += r.nbuckets;
        }
        paths_.push_back(path);
        module_tables_.push_back(table);
        module_regions_.push_back(std::move(*region));
        added++;
    }
    return added;
}

std::optional<NativeUnwind::Function> NativeUnwind::function_at(uint64_t addr) const {
    for (size_t i = 0; i < modules_.size(); i++) {
        const auto& m = modules_[i];
        if (addr < m.start || addr >= m.end) continue;
        if (auto f = module_tables_[i]->function_at(addr - m.bias))
            return Function{paths_[i], f->first, f->second, m.bias};
        return std::nullopt;
    }
    return std::nullopt;
}

}  // namespace bb
