// beam-bpf-procs: every Erlang process of a running BEAM VM, read from outside (the process table
// and each Process with process_vm_readv): the VM does no work to answer, and is never stopped
// or written to.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "base/clock.hpp"
#include "base/error.hpp"
#include "base/text.hpp"
#include "base/usage.hpp"
#include "find/find_vm.hpp"
#include "inspect/processes.hpp"
#include "inspect/procs_report.hpp"
#include "run/options.hpp"
#include "symbols/symbolizer.hpp"
#include "target/vm.hpp"

using namespace bb;

namespace {

// The renderers' options (inspect/procs_report.hpp), and which VM and how to read it.
struct Options : ProcsOptions {
    std::vector<std::string> targets;  // the PID words, or --node (find/find_vm.hpp)
    std::string node, offsets_file;
    bool raw_names = false;
};

int run(int argc, char** argv) {
    CLI::App app{
        "beam-bpf-procs: the Erlang processes of a running BEAM VM (OS pid of beam.smp), read from\n"
        "outside with process_vm_readv: the VM does no work to answer and is never stopped. Needs root\n"
        "or CAP_SYS_PTRACE. MEMORY is process_info(P, memory) less links, monitors and messages not yet\n"
        "on the heap; HEAP is total_heap_size and STACK stack_size, in words; MSGQ counts the messages\n"
        "in the process's own queue (not signals still in transit); REDS are the reductions up to its\n"
        "last time on a scheduler. BINARY is the bytes of the off-heap (refc) binaries it references,\n"
        "as process_info(P, binary) lists them: a binary held by several processes counts in each.\n\n"
        "--watch SECONDS shows, every interval, what each process gained in it (memory, queue,\n"
        "reductions), ranked by --sort. --inspect PROC copies one process's heaps while it is not running\n"
        "and lists the terms it holds (its stack's Y registers, dictionary and messages), biggest first,\n"
        "with their flat sizes in words (as erts_debug:flat_size/1 counts them).\n\n"
        "--stacks lists every process's Erlang stack, processes in the same state with the same frames\n"
        "as one group, the biggest first (-t groups): COUNT [STATE] (the VM's own: waiting, runnable,\n"
        "suspended, running, garbage_collecting, exiting), then the frames, the function the process\n"
        "resumes in first, then each caller found on its stack (return addresses into known JIT code).\n"
        "A process on a scheduler is not walked: its state and the function the VM names. A stack that\n"
        "changes while read is read again, then left out and counted; a stack deeper than 16,384 words\n"
        "keeps its leaf-most frames and is marked truncated. The processes of a group of up to 3 are named.\n\n"
        "--binaries lists the node's off-heap binaries, biggest first (-t binaries): each one's size, its\n"
        "reference count (REFC), the processes that reference it, and ELSEWHERE, the references no\n"
        "process's list accounts for (ETS tables, ports, the VM itself); then the processes by the bytes\n"
        "of binaries they reference: BINARY and COUNT as process_info(P, binary) counts (a binary\n"
        "the process holds 31 handles to counts 31 times), DISTINCT each binary once. A binary leak's\n"
        "holder is the top HOLDER, or the top row of --watch --sort binary.\n\n"
        "--ets lists every ETS table, biggest first (-t tables): its id (its name if named_table), name,\n"
        "type, protection, OBJECTS (ets:info(T, size)), MEMORY (ets:info(T, memory), in bytes: the table's\n"
        "own count of what it allocated, off-heap binaries in it not included), read and write\n"
        "concurrency, and its owner. With --watch, the tables that grew or changed in each interval."};
    Options o;
    add_target_options(app, o.targets, o.node);
    app.add_option("--sort", o.sort, "order: memory, binary, heap, stack, queue, reductions (largest first)")
        ->capture_default_str();
    app.add_option("-t,--top", o.top, "rows to show (groups with --stacks)")->capture_default_str();
    app.add_flag("--all", o.all, "show every process (every root with --inspect, every group with --stacks)");
    app.add_flag("--json", o.json, "JSON: one document (one line per interval with --watch)");
    app.add_flag("--raw-names", o.raw_names, "Elixir modules as the VM's atoms ('Elixir.MyApp.Repo')");
    app.add_option("--offsets", o.offsets_file, "struct offset table to use instead of the built-in ones");
    auto* watch = app.add_option("--watch", o.watch, "every SECONDS, the growth in that interval")
                      ->check(CLI::Range(0.05, 3600.0));
    app.add_option("--count", o.count, "with --watch: stop after N intervals (0: run until interrupted)")
        ->capture_default_str()
        ->needs(watch);
    auto* inspect = app.add_option("--inspect", o.inspect, "PROC, a pid (<0.85.0>) or a registered name: its heap")
                        ->excludes(watch);
    app.add_flag("--stacks", o.stacks, "every process's stack, grouped by state and frames, the biggest group first")
        ->excludes(watch)
        ->excludes(inspect);
    app.add_flag("--binaries", o.binaries,
                 "the node's off-heap binaries, biggest first, with the processes holding each")
        ->excludes(watch)
        ->excludes(inspect)
        ->excludes("--stacks");
    app.add_flag("--ets", o.ets, "every ETS table, biggest first (with --watch: their growth)")
        ->excludes(inspect)
        ->excludes("--stacks")
        ->excludes("--binaries");
    app.add_option("--depth", o.depth, "with --inspect: ~P depth of each term printed (0: whole)")
        ->capture_default_str()
        ->check(CLI::NonNegativeNumber)
        ->needs(inspect);
    app.add_option("--syntax", o.syntax,
                   "with --inspect: terms as Erlang writes them (erlang), as Elixir does (elixir: %{a: 1}, "
                   "\"text\", #PID<0.85.0>), or as the process's own language (auto: Elixir's when its name is)")
        ->check(CLI::IsMember({"auto", "erlang", "elixir"}))
        ->capture_default_str()
        ->needs(inspect);
    app.add_option("--width", o.width, "with --inspect: characters of each term printed (0: all)")
        ->capture_default_str()
        ->needs(inspect);
    app.add_option("--max-heap", o.max_heap_mib, "with --inspect: MiB of heap to copy at most")
        ->capture_default_str()
        ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 20))
        ->needs(inspect);
    try {
        app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        return usage_error(app, e);
    }

    static const std::set<std::string> kSorts{"memory", "binary", "heap", "stack", "queue", "reductions"};
    if (!kSorts.count(o.sort))
        throw UserError(
            fmt::format("--sort {}: the orders are memory, binary, heap, stack, queue, reductions", o.sort));
    o.columns = output_columns();
    Vm vm = Vm::attach(find_vm(o.targets, o.node), o.offsets_file);
    ProcessNames names(vm, o.raw_names);
    Symbolizer sym(vm, {.raw_names = o.raw_names});
    auto jit_name = [&sym](uint64_t addr) -> std::optional<std::string> {
        if (auto hit = sym.jit().lookup(addr, monotonic_ns()); hit && hit->range) return hit->range->name;
        return std::nullopt;
    };
    ProcsContext c{vm, names, jit_name, o.raw_names, sym.emulator() ? sym.emulator()->normal_exit : 0};
    if (!c.vm.caveat().empty()) fmt::print(stderr, "beam-bpf-procs: warning: {}\n", printable(c.vm.caveat()));
    if (!o.inspect.empty()) return procs_inspect(c, o);
    if (o.stacks) return procs_stacks(c, o);
    if (o.binaries) return procs_binaries(c, o);
    if (o.ets) return procs_ets(c, o);
    if (o.watch > 0) return procs_watch(c, o);
    return procs_table(c, o);
}
}  // namespace

int main(int argc, char** argv) {
    return guarded_main("beam-bpf-procs", [&] { return run(argc, argv); });
}
