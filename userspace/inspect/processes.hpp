// Who an Erlang process is, in the words an operator uses: its registered name, its process
// label (proc_lib:set_label/1, OTP 27), or its initial call. The walker records the registered
// name and the VM's initial call at the sample; the rest is read here from the VM's memory (its
// atom table, the process table, a process's dictionary): untrusted, bounded, never written.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "beam_bpf.h"
#include "inspect/terms.hpp"
#include "inspect/process_table.hpp"
#include "target/vm.hpp"

namespace bb {

// The text of the atom `term` in the atom table at `table` (&erts_atom_table: an IndexTable of
// Atom entries), read as `release` keeps it: the entry's `len` bytes at its name pointer (up to
// OTP 27), or the heap binary its name term points to (28 on). nullopt if `term` is not an atom
// of the table or its text does not read as described.
std::optional<std::string> read_atom_text(const RemoteMemory& mem, const VmOffsets& o, const OtpRelease& release,
                                          uint64_t table, uint64_t term);

// Where the `len` bytes of a binary term laid out as `t` describes are (a heap binary, or a
// sub-binary of an off-heap one: the forms atom text takes from OTP 28); nullopt if `bin` is
// neither, or not of `len` bytes.
std::optional<uint64_t> binary_bytes(const RemoteMemory& mem, const TermLayout& t, uint64_t bin, uint64_t len);

// The atom terms whose text is each of `texts` (0 for one not found) in the table at `table`,
// by a scan of its first `max_atoms` entries: a few reads of each page of entries (their
// lengths, then the text of those whose length is wanted), never one per atom.
std::vector<uint64_t> find_atoms(const RemoteMemory& mem, const VmOffsets& o, const OtpRelease& release, uint64_t table,
                                 const std::vector<std::string_view>& texts, uint64_t max_atoms);

// Atom text from erts_atom_table. Atoms are never freed, so each is read once.
class AtomTable {
public:
    explicit AtomTable(const Vm& vm);
    // The text of an atom term ("init"); nullopt if `term` is not an atom of this VM or its
    // text cannot be read.
    std::optional<std::string> text(uint64_t term);
    // find_atoms() in this VM's table.
    std::vector<uint64_t> find(const std::vector<std::string_view>& texts, uint64_t max_atoms);

private:
    const Vm& vm_;
    uint64_t table_ = 0;  // &erts_atom_table
    std::unordered_map<uint64_t, std::string> known_;
};

// What a process is called in reports, read once per pid: the first sample of a process names
// it for the rest of the run.
class ProcessNames {
public:
    ProcessNames(const Vm& vm, bool raw_names);
    // Why names are not read on this VM ("" when they are): checked once at attach, by reading
    // the name init (<0.0.0>) is registered under.
    const std::string& unavailable() const { return unavailable_; }
    // Unavailable only because the VM is starting (init not registered yet): worth reading again.
    bool starting() const { return starting_; }

    // "my_server", "{worker,3}" (a label), "MyApp.Conn.init/1" (an initial call), or "" when
    // none is known; for a record the walker attributed to a process (BB_F_PROC), or to a port
    // task (BB_F_PORT): its connected process's.
    const std::string& name(const bb_record& r);
    // The same for any process: its pid term, Process *, registered name (atom, or 0) and
    // initial call as the VM keeps them (module, function, arity).
    const std::string& name(uint64_t pid, uint64_t c_p, uint64_t reg_name, const std::array<uint64_t, 3>& initial);
    // The atoms (terms) '$initial_call' and '$callers' of this VM, 0 until learn_dictionary_keys()
    // or a dictionary read has found them: the sampler hands them to the walker, which then
    // reads those two entries of a process's dictionary at the sample (bb_record.dict_initial,
    // dict_caller).
    struct DictionaryKeys {
        uint64_t initial_call = 0, callers = 0;
    };
    const DictionaryKeys& dictionary_keys() const { return keys_; }
    // Finds them now in the atom table, so that the walker reads them from the first samples:
    // a node whose tasks all live a millisecond seldom shows a live one to learn them from.
    void learn_dictionary_keys();
    // "lists:foldl/3" (or as Elixir writes it) for an ErtsCodeMFA's words; "" if they are not one.
    std::string mfa_text(uint64_t m, uint64_t f, uint64_t a);
    // The name already read for `pid_term` ("" if none).
    const std::string& known(uint64_t pid_term) const;
    // The kind of the process named `pid_term`, when its name is a label or process_name tuple
    // whose first element is an atom ({rabbit_channel,...} for RabbitMQ's channels); "" if not.
    const std::string& kind(uint64_t pid_term) const;
    // "name <0.85.0>", or the pid alone when no name was read for it.
    std::string root_frame(uint64_t pid_term) const;

    // The pid term of the process now registered as `name` (a scan of the process table);
    // nullopt when none is.
    std::optional<uint64_t> whereis(std::string_view name);
    // Atom and pid text for the term printer (reads go to the VM's memory).
    const term::TermSource& term_source() const { return terms_; }

private:
    // The name an atom registers ("my_server", MyApp.Repo for 'Elixir.MyApp.Repo'), "" if unreadable.
    std::string registered(uint64_t atom);
    // What the walker read of a process's dictionary at the sample (bb_record), for a process
    // gone before its record is read.
    struct AtSample {
        std::array<uint64_t, 3> initial_call{};
        uint64_t caller = 0;
    };
    std::string read_name(uint64_t pid, uint64_t c_p, uint64_t reg_name, const std::array<uint64_t, 3>& initial,
                          const AtSample& at_sample);
    std::string name_at_sample(const std::array<uint64_t, 3>& initial, const AtSample& at_sample);
    const std::string& name(uint64_t pid, uint64_t c_p, uint64_t reg_name, const std::array<uint64_t, 3>& initial,
                            const AtSample& at_sample);
    // The values of '$process_label', '$initial_call', process_name (RabbitMQ's), '$callers'
    // and '$ancestors' in the dictionary of the process at c_p, in one pass over it.
    struct DictNames {
        std::optional<uint64_t> label, initial_call, process_name, callers, ancestors;
    };
    DictNames read_dictionary(uint64_t c_p);
    // "{rabbit_channel,...}" for a tuple term whose first element is an atom; "" for any other.
    std::string kind_of(uint64_t term);
    // Whom an Elixir task (a process with '$callers') works for, as its name says it: the first
    // registered one of `who` (its callers, then its ancestors: its Task.Supervisor, say), else
    // the first's name or pid; "" if `who` holds no local pid.
    std::string task_owner(std::vector<uint64_t> who);
    // The name of a process that may not have been sampled: from the process table (read at
    // most once a second for pids not seen yet).
    std::string name_of_pid(uint64_t pid);
    const ProcessEntry* entry_of(uint64_t pid);  // from table_, read again if older than a second

    const Vm& vm_;
    bool raw_names_;
    AtomTable atoms_;
    term::TermSource terms_;  // the VM's memory, atoms and pids
    std::string unavailable_;
    bool starting_ = false;
    std::unordered_map<uint64_t, std::string> names_;  // pid term -> name
    std::unordered_map<uint64_t, std::string> kinds_;  // pid term -> kind, for those that have one
    // The last process table read for name_of_pid(), and when; pid term -> its entry's names.
    std::unordered_map<uint64_t, ProcessEntry> table_;
    std::chrono::steady_clock::time_point table_read_{};
    DictionaryKeys keys_;
    int naming_depth_ = 0;  // a task's owner may be a task: named at most two levels up
};

}  // namespace bb
