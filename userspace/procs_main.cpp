// beam-bpf-procs: every Erlang process of a running BEAM VM, read from outside (the process table
// and each Process with process_vm_readv): the VM does no work to answer, and is never stopped
// or written to.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli.hpp"
#include "clock.hpp"
#include "process_table.hpp"
#include "processes.hpp"
#include "symbolizer.hpp"
#include "vm.hpp"

using namespace bb;

namespace {

struct Row {
    const ProcessEntry* p;
    std::string pid, name, initial, current;
};

std::string human_bytes(uint64_t b) {
    if (b < 10 * 1024) return fmt::format("{} B", b);
    if (b < 10 * 1024 * 1024) return fmt::format("{} KiB", b / 1024);
    return fmt::format("{} MiB", b / (1024 * 1024));
}

int run(int argc, char** argv) {
    CLI::App app{
        "beam-bpf-procs: the Erlang processes of a running BEAM VM (OS pid of beam.smp), read from\n"
        "outside with process_vm_readv: the VM does no work to answer and is never stopped. Needs root\n"
        "or CAP_SYS_PTRACE. MEMORY is process_info(P, memory) less links, monitors and messages not yet\n"
        "on the heap; HEAP is total_heap_size and STACK stack_size, in words; MSGQ counts the messages\n"
        "in the process's own queue (not signals still in transit); REDS are the reductions up to its\n"
        "last time on a scheduler."};
    int pid = 0;
    std::string sort = "memory", offsets_file;
    size_t top = 20;
    bool all = false, json = false, raw_names = false;
    app.add_option("pid", pid, "OS pid of beam.smp")->required();
    app.add_option("--sort", sort, "order: memory, heap, stack, queue, reductions (largest first)")
        ->capture_default_str();
    app.add_option("-t,--top", top, "rows to show")->capture_default_str();
    app.add_flag("--all", all, "show every process");
    app.add_flag("--json", json, "one JSON document: every process (or -t of them), with each field");
    app.add_flag("--raw-names", raw_names, "Elixir modules as the VM's atoms ('Elixir.MyApp.Repo')");
    app.add_option("--offsets", offsets_file, "struct offset table to use instead of the built-in ones");
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return app.exit(e);
    }

    static const std::set<std::string> kSorts{"memory", "heap", "stack", "queue", "reductions"};
    if (!kSorts.count(sort))
        throw UserError(fmt::format("--sort {}: the orders are memory, heap, stack, queue, reductions", sort));
    Vm vm = Vm::attach(pid, offsets_file);
    ProcessNames names(vm, raw_names);
    Symbolizer sym(vm, {.raw_names = raw_names});
    uint64_t t0 = monotonic_ns();
    ProcessTable table = read_process_table(vm);
    uint64_t read_ns = monotonic_ns() - t0;
    if (auto why = table.sizes_mismatch(); !why.empty())
        throw UserError(fmt::format("the Process sizes do not read right on this build ({}): offsets from {}", why,
                                    vm.offsets().origin));
    if (!vm.caveat().empty()) fmt::print(stderr, "beam-bpf-procs: warning: {}\n", vm.caveat());

    auto key = [&](const ProcessEntry& e) -> uint64_t {
        if (sort == "heap") return e.total_heap_sz();
        if (sort == "stack") return e.stack_sz;
        if (sort == "queue") return static_cast<uint64_t>(std::max<int64_t>(e.msgq_len, 0));
        if (sort == "reductions") return e.reds;
        return e.memory(vm.offsets().proc_size);
    };
    std::vector<const ProcessEntry*> order;
    for (const auto& e : table.processes) order.push_back(&e);
    std::stable_sort(order.begin(), order.end(), [&](auto* a, auto* b) { return key(*a) > key(*b); });
    if (!all && order.size() > top) order.resize(top);

    std::vector<Row> rows;
    uint64_t now = monotonic_ns();
    for (const ProcessEntry* e : order) {
        Row r{e, vm.format_pid(e->pid), names.name(e->pid, e->c_p, e->reg_name, e->initial), {}, {}};
        r.initial = names.mfa_text(e->initial[0], e->initial[1], e->initial[2]);
        // Where it is: the function the VM last noted, else the one its resume address is in.
        if (e->current) {
            auto mfa = vm.mem().read<std::array<uint64_t, 3>>(e->current);
            if (mfa) r.current = names.mfa_text((*mfa)[0], (*mfa)[1], (*mfa)[2]);
        }
        if (r.current.empty()) {
            if (auto hit = sym.jit().lookup(e->i, now); hit && hit->range)
                r.current = raw_names ? hit->range->name : display_name(hit->range->name);
        }
        rows.push_back(std::move(r));
    }

    const uint32_t proc_size = vm.offsets().proc_size;
    if (json) {
        nlohmann::json j;
        j["vm_pid"] = vm.pid();
        j["otp_release"] = vm.release().major;
        j["processes_total"] = table.processes.size();
        j["unreadable"] = table.unreadable;
        j["read_ms"] = read_ns / 1e6;
        j["processes"] = nlohmann::json::array();
        for (const Row& r : rows) {
            const ProcessEntry& e = *r.p;
            j["processes"].push_back({{"pid", r.pid},
                                      {"name", r.name},
                                      {"initial_call", r.initial},
                                      {"current_function", r.current},
                                      {"status", e.status()},
                                      {"memory", e.memory(proc_size)},
                                      {"heap_size", e.heap_sz},
                                      {"old_heap_size", e.old_heap_sz},
                                      {"heap_fragments_size", e.mbuf_sz},
                                      {"total_heap_size", e.total_heap_sz()},
                                      {"stack_size", e.stack_sz},
                                      {"message_queue_len", e.msgq_len},
                                      {"reductions", e.reds}});
        }
        std::cout << j.dump(1) << "\n";
        return 0;
    }
    fmt::print("beam-bpf-procs: {} processes of {} {} ({}), {} unreadable, read in {:.1f} ms\n",
               table.processes.size(), vm.exe(), vm.pid(), vm.build().describe(), table.unreadable, read_ns / 1e6);
    if (!names.unavailable().empty()) fmt::print("beam-bpf-procs: warning: no names: {}\n", names.unavailable());
    fmt::print("{:<14} {:>9} {:>10} {:>7} {:>7} {:>12} {:<18} {:<32} {}\n", "PID", "MEMORY", "HEAP", "STACK", "MSGQ",
               "REDS", "STATUS", "NAME", "CURRENT");
    for (const Row& r : rows) {
        const ProcessEntry& e = *r.p;
        fmt::print("{:<14} {:>9} {:>10} {:>7} {:>7} {:>12} {:<18} {:<32} {}\n", r.pid,
                   human_bytes(e.memory(proc_size)), e.total_heap_sz(), e.stack_sz, e.msgq_len, e.reds, e.status(),
                   r.name, r.current);
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return guarded_main("beam-bpf-procs", [&] { return run(argc, argv); });
}
