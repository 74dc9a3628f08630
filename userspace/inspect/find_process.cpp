#include "inspect/find_process.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/closest.hpp"
#include "base/text.hpp"
#include "inspect/process_table.hpp"

namespace bb {

namespace {

// The process table, or nullopt when it cannot be read (then nothing is checked against it:
// the filter still works on a pid, and an error here would only hide that).
std::optional<ProcessTable> table_of(const Vm& vm) {
    try {
        auto t = read_process_table(vm);
        if (t.processes.empty()) return std::nullopt;
        return t;
    } catch (const std::exception&) {
        return std::nullopt;
    }
}

// Every registered name, as a user would type it: MyApp.Repo for 'Elixir.MyApp.Repo'.
std::vector<std::string> registered_names(const Vm& vm, const ProcessTable& table) {
    AtomTable atoms(vm);
    std::vector<std::string> out;
    for (const ProcessEntry& e : table.processes) {
        if (!e.reg_name) continue;
        auto text = atoms.text(e.reg_name);
        if (!text) continue;
        out.push_back(text->starts_with("Elixir.") ? text->substr(7) : term::printed_atom(*text));
    }
    return out;
}

}  // namespace

uint64_t find_process(const Vm& vm, ProcessNames& names, const std::string& given, const std::string& flag) {
    const PidLayout& pids = vm.release().pids;
    if (given.starts_with('<')) {
        auto pid = vm.parse_pid(given);
        if (!pid)
            throw UserError(
                fmt::format("{} {}: not a pid of OTP {} (a local pid like <0.85.0>: numbers below 2^{}, "
                            "serials below 2^{})",
                            flag, given, vm.release().major, pids.num_bits, pids.data_bits - pids.num_bits));
        const uint64_t want = *pid & pids.mask();
        // A pid that names no process would filter every sample out: a silent empty run.
        if (auto table = table_of(vm)) {
            auto is_it = [&](uint64_t p) { return (p & pids.mask()) == want; };
            if (std::ranges::none_of(table->processes, [&](const ProcessEntry& e) { return is_it(e.pid); }) &&
                std::ranges::none_of(table->unreadable_pids, is_it))
                throw UserError(
                    fmt::format("{} {}: no such process in the VM ({} processes now; beam-bpf-procs {} "
                                "lists them)",
                                flag, given, table->processes.size(), vm.pid()));
        }
        return want;
    }
    // Elixir writes an atom :worker_bob; the VM's name for it is worker_bob. (MyApp.Server is
    // 'Elixir.MyApp.Server': whereis() answers to either.)
    const std::string text = given.starts_with(':') ? given.substr(1) : given;
    if (!names.unavailable().empty())
        throw UserError(fmt::format("{} {}: registered names cannot be read here: {}; give a pid", flag, text,
                                    names.unavailable()));
    if (auto pid = names.whereis(text)) return *pid & pids.mask();
    std::string hint;
    if (auto table = table_of(vm)) {
        std::vector<std::string> near;
        for (auto& name : closest(text, registered_names(vm, *table), 3))
            if (edit_distance(text, name) <= std::max<size_t>(2, text.size() / 2)) near.push_back(printable(name));
        hint = near.empty() ? fmt::format(" (beam-bpf-procs {} lists the processes)", vm.pid())
                            : "; did you mean " + join(near, " or ") + "?";
    }
    throw UserError(fmt::format("{} {}: no process is registered under that name{}", flag, text, hint));
}

}  // namespace bb
