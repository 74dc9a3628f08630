#include "inspect/processes.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>
#include <vector>

#include "profile/frames.hpp"
#include "inspect/process_table.hpp"
#include "inspect/terms.hpp"

namespace bb {

using namespace term;

namespace {

// Index tables (index.h) keep their slots in pages of 2^10.
constexpr uint64_t kIndexPageShift = 10;
// An atom is at most 255 characters, of up to 4 UTF-8 bytes each.
constexpr int kMaxAtomBytes = 255 * 4;
// Dictionaries bigger than this are not searched for labels (a linear scan per process).
constexpr uint32_t kMaxDictSlots = 4096;
// Header words (erl_term.h, the same in every release): the subtag bits and where the arity
// starts (_HEADER_SUBTAG_MASK and _HEADER_ARITY_OFFS, which builds from 27 on export to
// debuggers as etp_header_subtag_mask and etp_header_arity_offs).
constexpr uint64_t kHeaderSubtagMask = 0x3c, kHeaderArityShift = 6;
// Names kept before the cache starts over (each is read again at its process's next sample).
constexpr size_t kMaxNames = 100'000;
const std::string kNoName;

}  // namespace

AtomTable::AtomTable(const Vm& vm) : vm_(vm) {
    try {
        table_ = vm.symbol_address("erts_atom_table");
    } catch (const UserError&) {
        table_ = 0;
    }
}

// Where the `len` bytes of the binary term `bin` are, for atom text from OTP 28 on (atom.c,
// atom_alloc(): a literal made by erts_hfact_new_binary_from_data()): an ErlHeapBits up to
// ERL_ONHEAP_BINARY_LIMIT (64) bytes, the bytes after its header and size in bits; above, an
// ErlSubBits (header, base_flags, start and end in bits, orig: a BinRef) whose bytes start at
// base_flags without its two flag bits, plus start (erl_bits.h, ERTS_GET_BITSTRING). nullopt
// unless the header, sizes and alignment are exactly those.
namespace {
// binary_bytes() from the term's first four words, read at bin - 2.
std::optional<uint64_t> binary_bytes_of(const std::array<uint64_t, 4>& head, const TermLayout& t, uint64_t bin,
                                        uint64_t len) {
    const uint64_t header = head[0], subtag = header & kHeaderSubtagMask, arity = header >> kHeaderArityShift;
    if (subtag == t.heap_bin && arity == 1 + (len + 7) / 8 && head[1] == 8 * len) return bin - 2 + 16;
    // ErlSubBits is 5 words; a literal's source was never writable (flag bits 0).
    const uint64_t base = head[1], start = head[2], end = head[3];
    if (subtag == t.sub_bin && arity == 4 && (base & 3) == 0 && start % 8 == 0 && end >= start &&
        end - start == 8 * len)
        return base + start / 8;
    return std::nullopt;
}
}  // namespace

std::optional<uint64_t> binary_bytes(const RemoteMemory& mem, const TermLayout& t, uint64_t bin, uint64_t len) {
    if (!is_boxed(bin) || !t.bits_unified()) return std::nullopt;
    auto head = mem.read<std::array<uint64_t, 4>>(bin - 2);
    return head ? binary_bytes_of(*head, t, bin, len) : std::nullopt;
}

std::optional<std::string> read_atom_text(const RemoteMemory& mem, const VmOffsets& o, const OtpRelease& release,
                                          uint64_t table, uint64_t term) {
    if (!is_atom(term) || table == 0) return std::nullopt;
    uint64_t ix = atom_index(term);
    auto entries = mem.read<int32_t>(table + o.itab_entries);
    if (!entries || ix >= static_cast<uint64_t>(std::max(*entries, 0))) return std::nullopt;
    auto seg = mem.read<uint64_t>(table + o.itab_seg_table);
    auto page = seg ? mem.read<uint64_t>(*seg + 8 * (ix >> kIndexPageShift)) : std::nullopt;
    auto atom = page ? mem.read<uint64_t>(*page + 8 * (ix & ((1u << kIndexPageShift) - 1))) : std::nullopt;
    auto len = atom ? mem.read<int16_t>(*atom + o.atom_len) : std::nullopt;
    // Up to 27 `name` is a byte pointer; from 28 the same word (u.bin) is a boxed term.
    auto name = atom ? mem.read<uint64_t>(*atom + o.atom_name) : std::nullopt;
    if (!len || !name || *len < 0 || *len > kMaxAtomBytes) return std::nullopt;
    uint64_t text = *name;
    if (release.atom_text == AtomText::binary) {
        auto at = binary_bytes(mem, release.terms, *name, static_cast<uint64_t>(*len));
        if (!at) return std::nullopt;
        text = *at;
    }
    auto bytes = mem.read_bytes(text, static_cast<size_t>(*len));
    if (!bytes) return std::nullopt;
    return std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size());
}

std::vector<uint64_t> find_atoms(const RemoteMemory& mem, const VmOffsets& o, const OtpRelease& release, uint64_t table,
                                 const std::vector<std::string_view>& texts, uint64_t max_atoms) {
    std::vector<uint64_t> found(texts.size(), 0);
    auto entries = table ? mem.read<int32_t>(table + o.itab_entries) : std::nullopt;
    auto seg = table ? mem.read<uint64_t>(table + o.itab_seg_table) : std::nullopt;
    if (!entries || !seg || *entries <= 0) return found;
    const uint64_t n = std::min<uint64_t>(static_cast<uint64_t>(*entries), max_atoms);
    constexpr uint64_t kPage = 1u << kIndexPageShift;
    // A page of entries at a time, each step one read of all its atoms (a node of a million
    // atoms is a few thousand reads, not millions): their lengths; where a length is wanted,
    // the text's pointer (from 28 a binary: its header words); then the text.
    struct Candidate {
        uint64_t atom;
        size_t len;
        uint64_t name = 0;
        std::array<uint64_t, 4> head{};
        uint64_t text = 0;
        std::string bytes;
    };
    std::vector<uint64_t> page(kPage);
    std::vector<int16_t> lens(kPage);
    std::vector<RemoteMemory::Piece> pieces;
    std::vector<Candidate> cand;
    auto read_each = [&](auto&& piece_of) {
        pieces.clear();
        for (Candidate& c : cand) pieces.push_back(piece_of(c));
        const std::vector<bool> ok = mem.read_many(pieces);
        size_t kept = 0;  // those whose step read (a self-move would empty a string)
        for (size_t i = 0; i < cand.size(); i++)
            if (ok[i] && pieces[i].addr && kept++ != i) cand[kept - 1] = std::move(cand[i]);
        cand.resize(kept);
    };
    for (uint64_t first = 0; first < n; first += kPage) {
        auto at = mem.read<uint64_t>(*seg + 8 * (first >> kIndexPageShift));
        if (!at || !mem.read(*at, std::as_writable_bytes(std::span(page)))) continue;
        cand.clear();
        for (uint64_t i = 0; i < kPage && first + i < n; i++)
            if (page[i])
                cand.push_back({.atom = first + i, .len = 0, .name = page[i], .head = {}, .text = 0, .bytes = {}});
        read_each([&](Candidate& c) {  // .name holds the Atom's address until its name is read
            return RemoteMemory::Piece{c.name + o.atom_len,
                                       std::as_writable_bytes(std::span(&lens[c.atom - first], 1))};
        });
        std::erase_if(cand, [&](Candidate& c) {
            c.len = static_cast<size_t>(std::max<int16_t>(lens[c.atom - first], 0));
            for (size_t k = 0; k < texts.size(); k++)
                if (!found[k] && c.len == texts[k].size()) return false;
            return true;
        });
        if (cand.empty()) continue;
        read_each([&](Candidate& c) {
            return RemoteMemory::Piece{c.name + o.atom_name, std::as_writable_bytes(std::span(&c.name, 1))};
        });
        // Up to 27 `name` is a byte pointer; from 28 the same word (u.bin) is a boxed term.
        if (release.atom_text == AtomText::binary) {
            read_each([&](Candidate& c) {
                const bool boxed = is_boxed(c.name) && release.terms.bits_unified();
                return RemoteMemory::Piece{boxed ? c.name - 2 : 0, std::as_writable_bytes(std::span(c.head))};
            });
            std::erase_if(cand, [&](Candidate& c) {
                c.text = binary_bytes_of(c.head, release.terms, c.name, c.len).value_or(0);
                return c.text == 0;
            });
        } else {
            for (Candidate& c : cand) c.text = c.name;
        }
        read_each([&](Candidate& c) {
            c.bytes.resize(c.len);
            return RemoteMemory::Piece{c.text, std::as_writable_bytes(std::span(c.bytes))};
        });
        for (const Candidate& c : cand)
            for (size_t k = 0; k < texts.size(); k++)
                if (!found[k] && c.bytes == texts[k]) found[k] = (c.atom << 6) | 0x0b;  // make_atom(): index, tag
        if (std::ranges::all_of(found, [](uint64_t t) { return t != 0; })) break;
    }
    return found;
}

std::vector<uint64_t> AtomTable::find(const std::vector<std::string_view>& texts, uint64_t max_atoms) {
    return find_atoms(vm_.mem(), vm_.offsets(), vm_.release(), table_, texts, max_atoms);
}

std::optional<std::string> AtomTable::text(uint64_t term) {
    if (auto it = known_.find(term); it != known_.end()) return it->second;
    auto s = read_atom_text(vm_.mem(), vm_.offsets(), vm_.release(), table_, term);
    if (s) known_.emplace(term, *s);
    return s;
}

namespace {

// The term layout the release's row describes (release.hpp, TermLayout) against the build's own
// constants for debuggers (erl_etp.c, exported from OTP 27 on: read in the live VM): "" when
// they agree, or when the release has no such constants.
std::string term_layout_mismatch(const Vm& vm) {
    const TermLayout& t = vm.release().terms;
    if (!t.bits_unified()) return "";
    const std::pair<const char*, uint64_t> expected[] = {{"etp_header_subtag_mask", kHeaderSubtagMask},
                                                         {"etp_header_arity_offs", kHeaderArityShift},
                                                         {"etp_heap_bits_subtag", t.heap_bin},
                                                         {"etp_sub_bits_subtag", t.sub_bin}};
    for (auto [symbol, value] : expected) {
        // A stripped build of 28 or later has none of them (hidden, then stripped): there the
        // names' own check stands alone, init's name read through the atom table, whose text
        // is a heap binary from 28 on (binary_bytes() takes nothing else).
        uint64_t at;
        try {
            at = vm.symbol_address(symbol);
        } catch (const UserError&) {
            continue;
        }
        auto v = vm.mem().read<uint64_t>(at);
        if (v != value)
            return v ? fmt::format("this build's {} is {:#x}, not {:#x} as the OTP {} source has it", symbol, *v, value,
                                   vm.release().major)
                     : fmt::format("cannot read this build's {} to check its term layout", symbol);
    }
    return "";
}

}  // namespace

ProcessNames::ProcessNames(const Vm& vm, bool raw_names) : vm_(vm), raw_names_(raw_names), atoms_(vm) {
    terms_.read = [&vm](uint64_t addr, std::span<std::byte> dst) { return vm.mem().read(addr, dst); };
    // A name's binaries (RabbitMQ's queue <<"orders">>) are read too: at most a label's 80 bytes.
    terms_.read_off_heap = terms_.read;
    terms_.atom_text = [this](uint64_t atom) { return atoms_.text(atom); };
    terms_.pid_text = [&vm](uint64_t pid) { return vm.format_pid(pid); };
    terms_.layout = vm.release().terms;
    if (auto why = term_layout_mismatch(vm); !why.empty()) {
        unavailable_ = why;
        return;
    }
    // init is <0.0.0>, in slot 0 of the process table, registered as init, for the life of
    // the VM: reading its name through every offset names use checks them all.
    const VmOffsets& o = vm.offsets();
    const RemoteMemory& mem = vm.mem();
    std::optional<uint64_t> init, reg, name;
    try {
        auto tab = mem.read<uint64_t>(vm.symbol_address("erts_proc") + o.ptab_tab);
        init = tab ? mem.read<uint64_t>(*tab) : std::nullopt;
    } catch (const UserError&) {
    }
    reg = init ? mem.read<uint64_t>(*init + o.proc_reg) : std::nullopt;
    name = reg && *reg ? mem.read<uint64_t>(*reg + o.regproc_name) : std::nullopt;
    auto text = name ? atoms_.text(*name) : std::nullopt;
    // A VM seen within its first moments (the agent finds VMs as they start) has init in slot
    // 0 but not registered yet: no registration is not a wrong layout.
    if (init && *init && reg && *reg == 0) {
        unavailable_ = "init is not registered yet (the VM is starting)";
        starting_ = true;
        return;
    }
    if (text != "init") {
        unavailable_ = fmt::format(
            "the registered name of <0.0.0> does not read as init: this build's atom table or "
            "Process offsets are not as OTP {} has them",
            vm.release().major);
        return;
    }
    auto m = mem.read<uint64_t>(*init + o.proc_initial), f = mem.read<uint64_t>(*init + o.proc_initial + 8);
    auto a = mem.read<uint64_t>(*init + o.proc_initial + 16);
    if (!m || !f || !a || !atoms_.text(*m) || !atoms_.text(*f) || *a > 255)
        unavailable_ =
            "the initial call of <0.0.0> does not read as one (struct offsets for names do not fit this build)";
}

std::string ProcessNames::mfa_text(uint64_t m, uint64_t f, uint64_t a) {
    auto mod = atoms_.text(m), fun = atoms_.text(f);
    if (!mod || !fun || a > 255) return "";
    std::string vm_name = fmt::format("{}:{}/{}", printed_atom(*mod), printed_atom(*fun), a);
    return raw_names_ ? vm_name : display_name(vm_name);
}

namespace {
// The first `max` elements of a list in the VM's memory, fewer where a read fails (a bounded
// walk: the target is hostile, its lists may be cyclic).
std::vector<uint64_t> list_heads(const RemoteMemory& mem, uint64_t list, int max) {
    std::vector<uint64_t> out;
    for (int n = 0; is_list(list) && n < max; n++) {
        auto cell = mem.read<std::array<uint64_t, 2>>(list - 1);
        if (!cell) break;
        out.push_back((*cell)[0]);
        list = (*cell)[1];
    }
    return out;
}
}  // namespace

ProcessNames::DictNames ProcessNames::read_dictionary(uint64_t c_p) {
    DictNames found;
    const VmOffsets& o = vm_.offsets();
    const RemoteMemory& mem = vm_.mem();
    auto dict = mem.read<uint64_t>(c_p + o.proc_dictionary);
    if (!dict || *dict == 0 || (*dict & 7)) return found;
    auto used = mem.read<uint32_t>(*dict + o.pdict_used_slots);
    if (!used || *used == 0 || *used > kMaxDictSlots) return found;
    std::vector<uint64_t> slots(*used);
    if (!mem.read(*dict + o.pdict_data, std::as_writable_bytes(std::span(slots)))) return found;
    // A slot holds nothing, a {Key, Value} tuple, or a list of them (keys that collide).
    auto take = [&](uint64_t t) {
        if (!is_boxed(t)) return;
        std::array<uint64_t, 3> kv;
        if (!mem.read(t - 2, std::as_writable_bytes(std::span(kv))) || kv[0] != tuple_header(2) || !is_atom(kv[1]))
            return;
        auto key = atoms_.text(kv[1]);
        if (key == "$process_label") found.label = kv[2];
        else if (key == "$initial_call") found.initial_call = kv[2], keys_.initial_call = kv[1];
        // RabbitMQ's name for its queue and channel processes (rabbit_misc): a label by another key.
        else if (key == "process_name") found.process_name = kv[2];
        // Elixir's Task: the processes it works for, nearest first.
        else if (key == "$callers") found.callers = kv[2], keys_.callers = kv[1];
        else if (key == "$ancestors") found.ancestors = kv[2];
    };
    for (uint64_t t : slots) {
        take(t);
        for (uint64_t e : list_heads(mem, t, 64)) take(e);
        if (found.label && found.initial_call && found.process_name && found.callers && found.ancestors) break;
    }
    return found;
}

std::string ProcessNames::registered(uint64_t atom) {
    auto text = atoms_.text(atom);
    if (!text) return "";
    constexpr std::string_view kElixir = "Elixir.";
    if (!raw_names_ && text->starts_with(kElixir) && text->size() > kElixir.size()) return text->substr(kElixir.size());
    return printed_atom(*text);
}

std::string ProcessNames::read_name(uint64_t pid, uint64_t c_p, uint64_t reg_name,
                                    const std::array<uint64_t, 3>& initial_call, const AtSample& at_sample) {
    if (reg_name)
        if (std::string text = registered(reg_name); !text.empty()) return text;
    // The label and proc_lib's initial call are in the process dictionary, read now: only
    // while the Process at c_p is still the one sampled.
    const RemoteMemory& mem = vm_.mem();
    auto same = [&] { return mem.read<uint64_t>(c_p + vm_.offsets().proc_id) == pid; };
    if (c_p && same()) {
        auto [label, initial, process_name, callers, ancestors] = read_dictionary(c_p);
        std::string text, kind;
        if (label) text = term::text(terms_, *label).value_or(""), kind = kind_of(*label);
        if (text.empty() && process_name)
            text = term::text(terms_, *process_name).value_or(""), kind = kind_of(*process_name);
        if (!text.empty() && same()) {
            if (!kind.empty()) kinds_[pid] = std::move(kind);
            return text;
        }
        if (initial && is_boxed(*initial)) {
            auto mfa = mem.read<std::array<uint64_t, 4>>(*initial - 2);
            if (mfa && (*mfa)[0] == tuple_header(3) && is_small((*mfa)[3]))
                text = mfa_text((*mfa)[1], (*mfa)[2], static_cast<uint64_t>(small_value((*mfa)[3])));
        }
        if (text.empty()) text = mfa_text(initial_call[0], initial_call[1], initial_call[2]);
        // A task's initial call is often a closure's name (BbShop.-main/0-fun-1-/0), or
        // proc_lib's: whom it works for says more, and groups the tasks of one owner.
        if (callers && same()) {
            std::vector<uint64_t> who = list_heads(mem, *callers, 8), up = list_heads(mem, ancestors.value_or(kNil), 8);
            who.insert(who.end(), up.begin(), up.end());
            if (std::string owner = task_owner(who); !owner.empty())
                text = text.empty() ? "task of " + owner : text + " (task of " + owner + ")";
        }
        if (!text.empty() && same()) return text;
    }
    return name_at_sample(initial_call, at_sample);
}

// A process gone (or reused) before its record was read: named by what the walker read at the
// sample, its dictionary's initial call and first caller where it read them.
std::string ProcessNames::name_at_sample(const std::array<uint64_t, 3>& initial, const AtSample& at) {
    const auto& mfa = at.initial_call;
    std::string text;
    if (is_atom(mfa[0]) && is_atom(mfa[1]) && is_small(mfa[2]))
        text = mfa_text(mfa[0], mfa[1], static_cast<uint64_t>(small_value(mfa[2])));
    if (text.empty()) text = mfa_text(initial[0], initial[1], initial[2]);
    if (is_local_pid(at.caller))
        if (std::string owner = task_owner({at.caller}); !owner.empty())
            text = text.empty() ? "task of " + owner : text + " (task of " + owner + ")";
    return text;
}

std::string ProcessNames::task_owner(std::vector<uint64_t> who) {
    // A registered name as an atom ($ancestors holds a supervisor's so) or as its process's.
    for (uint64_t t : who) {
        const ProcessEntry* e = is_local_pid(t) ? entry_of(t) : nullptr;
        uint64_t atom = is_atom(t) ? t : e ? e->reg_name : 0;
        if (atom)
            if (std::string text = registered(atom); !text.empty()) return text;
    }
    if (who.empty() || !is_local_pid(who[0])) return "";
    std::string caller = name_of_pid(who[0]);
    return caller.empty() ? vm_.format_pid(who[0]) : caller;
}

void ProcessNames::learn_dictionary_keys() {
    // The VM's default limit of atoms (+t): a node at it costs a read of each atom's length,
    // about 0.5 s, once a run.
    constexpr uint64_t kMaxAtoms = 1u << 20;
    if (!unavailable_.empty() || (keys_.initial_call && keys_.callers)) return;
    auto keys = atoms_.find({"$initial_call", "$callers"}, kMaxAtoms);
    if (!keys_.initial_call) keys_.initial_call = keys[0];
    if (!keys_.callers) keys_.callers = keys[1];
}

const ProcessEntry* ProcessNames::entry_of(uint64_t pid) {
    auto it = table_.find(pid);
    const auto now = std::chrono::steady_clock::now();
    if (it == table_.end() && now - table_read_ > std::chrono::seconds(1)) {
        table_read_ = now;
        table_.clear();
        try {
            for (const ProcessEntry& e : read_process_table(vm_).processes) table_.emplace(e.pid, e);
        } catch (const UserError&) {
            // A table that cannot be read now names no caller: the task keeps its own name.
        }
        it = table_.find(pid);
    }
    return it == table_.end() ? nullptr : &it->second;
}

std::string ProcessNames::name_of_pid(uint64_t pid) {
    if (auto it = names_.find(pid); it != names_.end() && !it->second.empty()) return it->second;
    const ProcessEntry* e = entry_of(pid);
    if (!e || naming_depth_ >= 2) return "";
    const ProcessEntry copy = *e;  // naming it may read the table again
    naming_depth_++;
    std::string text = name(copy.pid, copy.c_p, copy.reg_name, copy.initial, {});
    naming_depth_--;
    return text;
}

const std::string& ProcessNames::name(const bb_record& r) {
    if ((r.flags & BB_F_PORT) && r.port_owner) {
        // A port's connected process, seldom sampled itself: named from the process table.
        name_of_pid(r.port_owner);
        return known(r.port_owner);
    }
    if (!(r.flags & BB_F_PROC)) return kNoName;
    AtSample at{{r.dict_initial[0], r.dict_initial[1], r.dict_initial[2]}, r.dict_caller};
    return name(r.erl_pid, r.c_p, r.reg_name, {r.initial[0], r.initial[1], r.initial[2]}, at);
}

const std::string& ProcessNames::name(uint64_t pid, uint64_t c_p, uint64_t reg_name,
                                      const std::array<uint64_t, 3>& initial) {
    return name(pid, c_p, reg_name, initial, {});
}

const std::string& ProcessNames::name(uint64_t pid, uint64_t c_p, uint64_t reg_name,
                                      const std::array<uint64_t, 3>& initial, const AtSample& at_sample) {
    if (!unavailable_.empty() || pid == 0) return kNoName;
    if (auto it = names_.find(pid); it != names_.end()) return it->second;
    if (names_.size() >= kMaxNames) names_.clear(), kinds_.clear();
    return names_.emplace(pid, read_name(pid, c_p, reg_name, initial, at_sample)).first->second;
}

const std::string& ProcessNames::known(uint64_t pid_term) const {
    auto it = names_.find(pid_term);
    return it == names_.end() ? kNoName : it->second;
}

const std::string& ProcessNames::kind(uint64_t pid_term) const {
    auto it = kinds_.find(pid_term);
    return it == kinds_.end() ? kNoName : it->second;
}

std::string ProcessNames::kind_of(uint64_t term) {
    if (!is_boxed(term)) return "";
    // The tuple's header (arity << 6: its tag and subtag are 0) and first element.
    auto words = vm_.mem().read<std::array<uint64_t, 2>>(term - 2);
    if (!words || ((*words)[0] & 0x3f) != 0 || ((*words)[0] >> 6) < 2 || !is_atom((*words)[1])) return "";
    std::string first = registered((*words)[1]);
    return first.empty() ? "" : "{" + first + ",...}";
}

std::string ProcessNames::root_frame(uint64_t pid_term) const {
    std::string pid = vm_.format_pid(pid_term);
    const std::string& n = known(pid_term);
    return n.empty() ? pid : n + " " + pid;
}

std::optional<uint64_t> ProcessNames::whereis(std::string_view wanted) {
    if (!unavailable_.empty()) return std::nullopt;
    for (const ProcessEntry& e : read_process_table(vm_).processes) {
        auto text = e.reg_name ? atoms_.text(e.reg_name) : std::nullopt;
        // 'Elixir.MyApp.Repo' answers to MyApp.Repo as well.
        if (text && (*text == wanted || printed_atom(*text) == wanted ||
                     (text->starts_with("Elixir.") && std::string_view(*text).substr(7) == wanted)))
            return e.pid;
    }
    return std::nullopt;
}

}  // namespace bb
