#include "run/options.hpp"

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

#include "run/events.hpp"
#include "sampling/wall_sampler.hpp"

namespace bb {

const char* event_name(Event e) { return mode_of(e).name; }

void add_target_options(CLI::App& app, std::vector<std::string>& targets, std::string& node) {
    // Several words are taken (and refused in one line by find_vm) rather than left to CLI11:
    // `$(pgrep beam.smp)` on a host with two VMs is a mistake worth its own message.
    app.add_option("PID", targets,
                   "OS pid of the running beam.smp; a wrapper's (erl, elixir, rabbitmq-server) or a thread's "
                   "pid is resolved to its VM");
    app.add_option("--node", node, "the VM whose node name (-name, -sname) is NAME, instead of a PID")
        ->option_text("NAME");
}

void add_common_options(CLI::App& app, CommonOptions& o) {
    add_target_options(app, o.targets, o.node);
    app.add_flag("-v,--verbose", o.verbose,
                 "the attach line in full: the VM's path and build-id, where its offsets, globals and symbols came "
                 "from, its native unwind tables, how it is sampled");
    // Given or not: -e wall has a default of its own.
    app.add_option_function<uint64_t>(
        "-F,--frequency",
        [&o](uint64_t f) {
            o.frequency = f;
            o.frequency_given = true;
        },
        fmt::format("samples per second of each of the VM's threads while it runs (cpu-clock event; default {}); "
                    "-e wall: ticks per second (default {})",
                    o.frequency, kWallHz));
    app.add_flag("--per-cpu", o.per_cpu,
                 "sample every CPU and filter on the VM in the kernel, instead of events on the VM's own "
                 "threads: every process on the machine then takes the sampling interrupts (see docs/performance.md)");
    app.add_option_function<std::string>(
        "-e,--event",
        [&o](const std::string& name) {
            const EventMode* m = mode_named(name);
            if (!m) throw UserError(fmt::format("-e {}: the events are {}", name, event_names()));
            o.event = m->event;
        },
        "what counts towards a sample: " + events_help());
    app.add_option("--threshold", o.threshold_us,
                   fmt::format("-e offcpu: blocks of this many microseconds or more are each walked; a shorter one "
                               "is walked with probability (its time / this) and weighed by this, which keeps "
                               "totals unbiased (default {}; 1 to 4000000)",
                               kOffcpuThresholdUs))
        ->check(CLI::Range(uint64_t{1}, uint64_t{4000000}));
    app.add_flag("--watchpoints-in-vm", o.watchpoints_in_vm,
                 "-e alloc in a virtual machine: refused without this, because a hypervisor can hand a "
                 "watchpoint's trap to the kernel without its cause, and the kernel then kills the VM with a "
                 "SIGTRAP (seen on some hosts, about once in several minutes of profiling; "
                 "docs/allocation-profiling.md#virtual-machines). Use it where losing the VM is acceptable");
    app.add_option("--period", o.period,
                   "sample every N events instead of -F: nanoseconds of CPU time (cpu-clock) or cycles; with "
                   "-e alloc, words allocated (on average; default 65536)");
    // Given or not, not its value: -d 0 is a mistake, not "until Ctrl-C".
    app.add_option_function<double>(
        "-d,--duration",
        [&o](double d) {
            o.duration = d;
            o.duration_given = true;
        },
        "seconds to run (default: until Ctrl-C, then report)");
    app.add_option("-t,--top", o.top,
                   "rows of the function table: Erlang functions first, each with the C code it called "
                   "(BIFs, NIFs, GC) in its SELF%, the hottest native code in a section below")
        ->capture_default_str();
    app.add_flag("--flat", o.flat, "the function table ranks every frame, C and kernel too, by its own time alone");
    app.add_option("-f,--format", o.format,
                   "the report: top (a table of functions), folded (collapsed stacks for flamegraph.pl "
                   "and inferno: root first, ';'-separated, a space and the count), pprof (gzipped "
                   "profile.proto for go tool pprof, Pyroscope, Parca; needs -o or a redirect), "
                   "speedscope (JSON for speedscope.app), html (a flame graph in one file, opened in "
                   "any browser, offline)")
        ->capture_default_str();
    app.add_flag("--folded", o.folded, "short for --format folded");
    app.add_flag("--lines", o.lines,
                 "tell lines apart: (file.erl:LINE) after Erlang frames (pprof always has the lines)");
    app.add_flag("--raw-names", o.raw_names,
                 "name functions as the VM's atoms ('Elixir.MyApp.Repo':all/2) instead of as Elixir "
                 "writes them (MyApp.Repo.all/2)");
    app.add_flag("--only-erlang", o.only_erlang,
                 "show Erlang frames only; samples without an Erlang process are left out (and no native "
                 "frames are unwound); a process in GC or exiting, whose stack is not walked, shows as [gc] or "
                 "[exiting]");
    app.add_option("--native-depth", o.native_depth,
                   fmt::format("native frames unwound in the kernel per sample, from the .eh_frame of beam.smp and "
                               "every library it maps, below the Erlang ones (0 to {}; 0: the native leaf only)",
                               BB_MAX_NATIVE_FRAMES))
        ->capture_default_str();
    app.add_flag("--kernel", o.kernel,
                 "add the kernel's frames to samples taken in a system call or fault (named from "
                 "/proc/kallsyms), as perf shows them");
    app.add_option("--max-depth", o.max_depth,
                   fmt::format("Erlang frames kept per sample (2 to {}). A deeper stack keeps its leaf-most frames "
                               "and, from "
                               "{} on, its {} root-most callers (within 128 KiB more of stack), with a \"[truncated N "
                               "frames]\" "
                               "frame between",
                               BB_MAX_FRAMES, 2 * BB_ROOT_FRAMES, BB_ROOT_FRAMES))
        ->capture_default_str();
    app.add_option("-o,--output", o.output, "write the report to FILE instead of stdout");
    app.add_option("--process", o.process,
                   "only samples of this Erlang process: a pid ('<0.85.0>') or a registered name "
                   "(my_server, MyApp.Repo), looked up when sampling starts; filtered in the kernel. Includes "
                   "the port tasks of the ports it is connected to (its sockets' [port tcp_inet] work)");
    app.add_flag("--by-process", o.by_process,
                 "group samples by Erlang process name: each stack gets a root frame naming its processes "
                 "(registered name, else process label or RabbitMQ's process_name, else initial call, with "
                 "\"(task of OWNER)\" for an Elixir task) and how many there were, in every format; the top "
                 "table adds a table of them. Processes whose label or process_name is a tuple are grouped "
                 "by its first element ({rabbit_channel,...} (200 processes)), each one's name below it. A "
                 "port task's samples ([port tcp_inet]) go under the process "
                 "the port is connected to");
    app.add_flag("--by-pid", o.by_pid, "as --by-process, a root frame per process: its name and pid");
    app.add_option("--every", o.every,
                   "continuous profiling: write a report every SECONDS, each to the files -o names "
                   "with %t replaced by its start time (e.g. -o 'prof-%t.pb.gz'), for Pyroscope, Parca or "
                   "an archive; memory stays flat");
    app.add_option("--stats", o.stats_file,
                   "write the run's figures (counters, BPF time per sample, start-up, peak RSS) as JSON");
    app.add_option("--offsets", o.offsets_file,
                   "struct offset table to use instead of the built-in ones (made by beam-bpf-offsets); "
                   "checked against the live VM");
}

namespace {

// The formats of --format ("top", or several: "html,pprof").
std::vector<Format> formats_of(const CommonOptions& o) {
    if (o.folded && o.format != "top" && o.format != "folded")
        throw UserError(fmt::format("--folded and --format {}: choose one", o.format));
    std::vector<Format> out;
    const std::string spec = o.folded ? "folded" : o.format;
    std::string_view rest = spec;
    while (true) {
        size_t comma = rest.find(',');
        std::string_view name = rest.substr(0, comma);
        auto f = parse_format(name);
        if (!f) throw UserError(fmt::format("--format {}: the formats are {}", name, format_names()));
        if (std::find(out.begin(), out.end(), *f) != out.end())
            throw UserError(fmt::format("--format {}: {} twice", o.format, name));
        out.push_back(*f);
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
    }
    return out;
}

}  // namespace

void resolve(CommonOptions& o) {
    const EventMode& mode = mode_of(o.event);
    for (const auto& m : event_modes())
        if (&m != &mode && m.own_option_given && m.own_option_given(o))
            throw UserError(fmt::format("{}: only with -e {}", m.own_option, m.name));
    mode.resolve(o);
    if (o.period == 0 && (o.frequency == 0 || o.frequency > 100000))
        throw UserError(fmt::format("-F {}: the frequency must be 1 to 100000 Hz", o.frequency));
    if (o.max_depth < 2 || o.max_depth > BB_MAX_FRAMES)
        throw UserError(fmt::format("--max-depth {}: must be 2 to {}", o.max_depth, BB_MAX_FRAMES));
    if (o.duration_given && !(o.duration >= kMinDuration))
        throw UserError(
            fmt::format("-d {}: a duration of at least {} s; omit -d to run until Ctrl-C", o.duration, kMinDuration));
    if (o.native_depth > BB_MAX_NATIVE_FRAMES)
        throw UserError(fmt::format("--native-depth {}: must be 0 to {}", o.native_depth, BB_MAX_NATIVE_FRAMES));
    if (o.kernel && o.only_erlang) throw UserError("--kernel adds kernel frames: not with --only-erlang");
    if (o.by_pid) o.by_process = true;
    o.formats = formats_of(o);
    bool to_stdout = o.output.empty() || o.output == "-";
    if (o.every < 0 || (o.every > 0 && o.every < 1))
        throw UserError(fmt::format("--every {}: at least 1 second", o.every));
    if (o.every > 0 && o.output.find("%t") == std::string::npos)
        throw UserError("--every needs -o with %t in it (each report's start time), e.g. -o 'prof-%t.pb.gz'");
    if (o.formats.size() > 1 && to_stdout)
        throw UserError(fmt::format("--format {}: several formats need -o PREFIX (each gets its own file)", o.format));
    if (is_binary(o.formats.front()) && to_stdout && isatty(STDOUT_FILENO))
        throw UserError(fmt::format("--format {} writes binary data: give -o FILE or redirect stdout", o.format));
    // A cpu-clock sample stands for 1/F s (or --period ns) of CPU time; cycles and allocation
    // records are counts only.
    o.ns_per_sample = !mode.cpu_time ? 0 : o.period ? o.period : 1'000'000'000ull / o.frequency;
}

std::string describe_event(const CommonOptions& o) { return mode_of(o.event).describe(o, o.verbose); }

uint64_t alloc_interval(const CommonOptions& o) {
    return o.event != Event::alloc ? 0 : o.period ? o.period : kAllocIntervalWords;
}

SamplerConfig sampler_config(const CommonOptions& o) {
    SamplerConfig c;
    c.frequency_hz = o.frequency;
    c.period_ns = o.period;
    c.per_cpu = o.per_cpu;
    c.max_frames = o.max_depth;
    c.max_native_frames = o.only_erlang ? 0 : o.native_depth;
    c.kernel_stacks = o.kernel;
    c.measure_walk = !o.stats_file.empty();
    mode_of(o.event).configure(o, c);
    return c;
}

void check_privileges() {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2]{};
    if (syscall(SYS_capget, &hdr, data) != 0) throw UserError("cannot read this process's capabilities");
    auto has = [&](int cap) { return (data[cap / 32].effective >> (cap % 32)) & 1; };
    std::vector<std::string> missing;
    if (!has(CAP_BPF) && !has(CAP_SYS_ADMIN)) missing.push_back("CAP_BPF");
    if (!has(CAP_PERFMON) && !has(CAP_SYS_ADMIN)) missing.push_back("CAP_PERFMON");
    if (!has(CAP_SYS_PTRACE)) missing.push_back("CAP_SYS_PTRACE");
    if (missing.empty()) return;
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    throw UserError(
        fmt::format("insufficient privileges: missing {}; run as root or grant CAP_BPF, "
                    "CAP_PERFMON and CAP_SYS_PTRACE",
                    list));
}

}  // namespace bb
