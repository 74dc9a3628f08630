#include "cli.hpp"

#include "clock.hpp"

#include <fmt/format.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <vector>

namespace bb {

namespace {
std::atomic<bool> g_stop{false};
const uint64_t g_launch_ns = monotonic_ns();  // static init: as close to exec as we get
void on_signal(int) { g_stop = true; }

size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<size_t> row(b.size() + 1);
    for (size_t j = 0; j <= b.size(); j++) row[j] = j;
    for (size_t i = 1; i <= a.size(); i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= b.size(); j++) {
            size_t up = row[j];
            row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] != b[j - 1])});
            diag = up;
        }
    }
    return row[b.size()];
}

}  // namespace

std::vector<NativeMatch> resolve_functions(const Vm& vm, const std::string& func, bool exact) {
    auto matches = [&](const std::string& name) { return exact ? name == func : name.rfind(func, 0) == 0; };
    std::vector<NativeMatch> found;
    std::vector<std::string> all;
    for (const auto& f : vm.mapped_files()) {
        std::optional<ElfFile> elf;
        uint64_t bias;
        if (f.path == vm.exe()) {
            bias = vm.load_bias();
        } else {
            try {
                elf.emplace(fmt::format("/proc/{}/root{}", vm.pid(), f.path));
            } catch (const std::exception&) {
                continue;  // not ELF (a data file mapped from offset 0)
            }
            bias = f.start - elf->first_load_vaddr();
        }
        const ElfFile& e = elf ? *elf : vm.elf();
        for (const auto& s : e.symbols()) {
            if (!s.is_func || s.size == 0) continue;
            if (matches(s.name))
                found.push_back({s, f.path, s.value + bias});
            else if (found.empty())
                all.push_back(s.name);
        }
        if (!found.empty()) break;  // the first file that has FUNC is the one meant
    }
    if (found.empty()) {
        std::sort(all.begin(), all.end());
        all.erase(std::unique(all.begin(), all.end()), all.end());
        std::stable_sort(all.begin(), all.end(), [&](const std::string& a, const std::string& b) {
            return edit_distance(func, a) < edit_distance(func, b);
        });
        std::string near;
        for (size_t i = 0; i < all.size() && i < 5; i++) near += (i ? ", " : "") + all[i];
        throw UserError(fmt::format("no function {}{} in {} or its libraries; closest: {}", func,
                                    exact ? "" : "*", vm.exe(), near));
    }
    std::sort(found.begin(), found.end(), [](const NativeMatch& a, const NativeMatch& b) { return a.sym.name < b.sym.name; });
    return found;
}

SamplerConfig::Probe entry_probe(const Vm& vm, const NativeMatch& m) {
    std::string bin = m.file == vm.exe() ? fmt::format("/proc/{}/exe", vm.pid())
                                         : fmt::format("/proc/{}/root{}", vm.pid(), m.file);
    return {bin, m.sym.file_offset};
}

std::string human_bytes(uint64_t b) {
    if (b < 10 * 1024) return fmt::format("{} B", b);
    if (b < 10 * 1024 * 1024) return fmt::format("{} KiB", b / 1024);
    return fmt::format("{} MiB", b / (1024 * 1024));
}

const std::vector<std::string>& gc_entry_points() {
    // Every way into the VM's garbage_collect() (erl_gc.c; read in OTP 25's and 27's source):
    // the JIT's heap test, BIFs and the emulator's helpers, after a BIF that built heap
    // fragments, hibernation, literal-area collection; dirty GCs go through
    // erts_garbage_collect_nobump too. The first is the one every build must have.
    static const std::vector<std::string> names{"erts_garbage_collect_nobump", "erts_garbage_collect",
                                                "erts_gc_after_bif_call_lhf",  "erts_gc_after_bif_call",
                                                "erts_garbage_collect_hibernate", "erts_garbage_collect_literals"};
    return names;
}

void add_common_options(CLI::App& app, CommonOptions& o) {
    app.add_option("PID", o.pid, "OS pid of the running beam.smp")->required();
    app.add_option("-F,--frequency", o.frequency,
                   "samples per second of each of the VM's threads while it runs (cpu-clock event)")
        ->capture_default_str();
    app.add_flag("--per-cpu", o.per_cpu,
                 "sample every CPU and filter on the VM in the kernel, instead of events on the VM's own "
                 "threads: every process on the machine then takes the sampling interrupts (see README)");
    app.add_option("-e,--event", o.event,
                   "what counts towards a sample: cpu-clock (CPU time, works everywhere), cycles (CPU "
                   "cycles from the hardware PMU, with the most precise IP the PMU gives; not in most VMs), "
                   "or alloc (beam-bpf-sample: an allocation profile, stacks weighed by the words each "
                   "process allocated on its heap, taken at every garbage collection; see README)")
        ->capture_default_str();
    app.add_option("--period", o.period_ns,
                   "sample every N events instead of -F: nanoseconds of CPU time (cpu-clock) or cycles");
    app.add_option("-d,--duration", o.duration, "seconds to run (default: until Ctrl-C, then report)");
    app.add_option("-t,--top", o.top, "rows of the function table")->capture_default_str();
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
                 "frames are unwound)");
    app.add_option("--native-depth", o.native_depth,
                   fmt::format("native frames unwound in the kernel per sample, from the .eh_frame of beam.smp and "
                               "every library it maps, below the Erlang ones (0 to {}; 0: the native leaf only)",
                               BB_MAX_NATIVE_FRAMES))
        ->capture_default_str();
    app.add_flag("--kernel", o.kernel,
                 "add the kernel's frames to samples taken in a system call or fault (named from "
                 "/proc/kallsyms), as perf shows them");
    app.add_option("--max-depth", o.max_depth,
                   fmt::format("Erlang frames kept per sample, the running function and the leaf-most callers (2 to {}); deeper "
                               "stacks are counted as truncated",
                               BB_MAX_FRAMES))
        ->capture_default_str();
    app.add_option("-o,--output", o.output, "write the report to FILE instead of stdout");
    app.add_option("--process", o.process,
                   "only samples of this Erlang process: a pid ('<0.85.0>') or a registered name "
                   "(my_server, MyApp.Repo), looked up when sampling starts");
    app.add_flag("--by-process", o.by_process,
                 "group samples by Erlang process: each stack gets a root frame naming its process "
                 "(registered name, else process label, else initial call; then the pid), in every format");
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

void validate(const CommonOptions& o) {
    if (o.period_ns == 0 && (o.frequency == 0 || o.frequency > 100000))
        throw UserError(fmt::format("-F {}: the frequency must be 1 to 100000 Hz", o.frequency));
    if (o.event != "cpu-clock" && o.event != "cycles" && o.event != "alloc")
        throw UserError(fmt::format("-e {}: the events are cpu-clock, cycles and alloc", o.event));
    if (o.period_ns && o.period_ns < 10000)
        throw UserError(fmt::format("--period {}: at least 10000 {}", o.period_ns,
                                    o.event == "cycles" ? "cycles" : "ns"));
    if (o.max_depth < 2 || o.max_depth > BB_MAX_FRAMES)
        throw UserError(fmt::format("--max-depth {}: must be 2 to {}", o.max_depth, BB_MAX_FRAMES));
    if (o.duration < 0) throw UserError("-d must not be negative");
    if (o.native_depth > BB_MAX_NATIVE_FRAMES)
        throw UserError(fmt::format("--native-depth {}: must be 0 to {}", o.native_depth, BB_MAX_NATIVE_FRAMES));
    if (o.kernel && o.only_erlang) throw UserError("--kernel adds kernel frames: not with --only-erlang");
    auto formats = formats_of(o);
    bool to_stdout = o.output.empty() || o.output == "-";
    if (o.every < 0 || (o.every > 0 && o.every < 1)) throw UserError(fmt::format("--every {}: at least 1 second", o.every));
    if (o.every > 0 && o.output.find("%t") == std::string::npos)
        throw UserError("--every needs -o with %t in it (each report's start time), e.g. -o 'prof-%t.pb.gz'");
    if (formats.size() > 1 && to_stdout)
        throw UserError(fmt::format("--format {}: several formats need -o PREFIX (each gets its own file)", o.format));
    if (is_binary(formats.front()) && to_stdout && isatty(STDOUT_FILENO))
        throw UserError(fmt::format("--format {} writes binary data: give -o FILE or redirect stdout", o.format));
    if (o.process.starts_with('<') && !PidLayout{60, 28, false}.parse(o.process))
        throw UserError(fmt::format("--process {}: expected a local pid like <0.85.0>, or a registered name", o.process));
}

std::string describe_event(const CommonOptions& o) {
    if (o.event == "alloc") return "alloc: words allocated, at every GC entry";
    std::string rate = o.period_ns ? fmt::format("every {} {}", o.period_ns, o.event == "cycles" ? "cycles" : "ns of CPU")
                                   : fmt::format("{} Hz", o.frequency);
    return fmt::format("{} {} {}", o.event, rate, o.per_cpu ? "per CPU" : "per VM thread");
}

SamplerConfig sampler_config(const CommonOptions& o) {
    SamplerConfig c;
    c.frequency_hz = o.frequency;
    c.period_ns = o.period_ns;
    c.per_cpu = o.per_cpu;
    c.cycles = o.event == "cycles";
    c.alloc = o.event == "alloc";
    c.max_frames = o.max_depth;
    c.max_native_frames = o.only_erlang ? 0 : o.native_depth;
    c.kernel_stacks = o.kernel;
    c.measure_walk = !o.stats_file.empty();
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
    throw UserError(fmt::format("insufficient privileges: missing {}; run as root or grant CAP_BPF, "
                                "CAP_PERFMON and CAP_SYS_PTRACE",
                                list));
}

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

namespace {
uint64_t unix_now_ns() {
    return static_cast<uint64_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}
}  // namespace

Output::Output(const CommonOptions& o) : pattern_(o.output), formats_(formats_of(o)) {
    if (pattern_.empty() || pattern_ == "-") return;
    if (o.every == 0) {
        open(unix_now_ns());
        return;
    }
    // The files come later: check now that they can be made there.
    auto slash = pattern_.rfind('/');
    std::string dir = slash == std::string::npos ? "." : pattern_.substr(0, slash + 1);
    if (access(dir.c_str(), W_OK) != 0) throw UserError(fmt::format("cannot write in {}: {}", dir, std::strerror(errno)));
}

void Output::open(uint64_t start_unix_ns) {
    if (pattern_.empty() || pattern_ == "-") return;
    time_t t = static_cast<time_t>(start_unix_ns / 1'000'000'000ull);
    tm utc{};
    gmtime_r(&t, &utc);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &utc);
    std::string base = pattern_;
    for (size_t at; (at = base.find("%t")) != std::string::npos;) base.replace(at, 2, stamp);
    files_.clear();
    paths_.clear();
    for (Format f : formats_) {
        paths_.push_back(formats_.size() > 1 ? base + file_suffix(f) : base);
        files_.push_back(std::make_unique<std::ofstream>(paths_.back(), std::ios::binary));
        if (!*files_.back()) throw UserError(fmt::format("cannot write {}: {}", paths_.back(), std::strerror(errno)));
    }
}

bool Output::has(Format f) const { return std::find(formats_.begin(), formats_.end(), f) != formats_.end(); }

std::ostream& Output::stream(Format f) {
    if (files_.empty()) return std::cout;
    return *files_.at(std::find(formats_.begin(), formats_.end(), f) - formats_.begin());
}

namespace {
const CommonOptions& checked(const CommonOptions& o) {
    validate(o);
    return o;
}
}  // namespace

// Member order is the order of the checks: bad options, then an unwritable -o, then
// privileges, then the VM.
Session::Session(const CommonOptions& o)
    : out((checked(o), o)),
      vm((check_privileges(), Vm::attach(o.pid, o.offsets_file))),
      sym(vm, {.only_erlang = o.only_erlang, .raw_names = o.raw_names}),
      names(vm, o.raw_names) {
    if (o.process.empty()) return;
    if (o.process.starts_with('<')) {
        const PidLayout& pids = vm.release().pids;
        if (!(only_pid = vm.parse_pid(o.process)))
            throw UserError(fmt::format("--process {}: not a pid of OTP {} (numbers below 2^{}, serials below 2^{})",
                                        o.process, vm.release().major, pids.num_bits, pids.data_bits - pids.num_bits));
        return;
    }
    if (!names.unavailable().empty())
        throw UserError(fmt::format("--process {}: registered names cannot be read here: {}; give a pid", o.process,
                                    names.unavailable()));
    auto pid = names.whereis(o.process);
    if (!pid) throw UserError(fmt::format("--process {}: no process is registered under that name", o.process));
    only_pid = *pid & vm.release().pids.mask();  // as parse_pid() gives it: the bits run_loop compares
    fmt::print(stderr, "beam-bpf: --process {} is {}\n", o.process, vm.format_pid(*only_pid));
}

void Session::start(SamplerConfig cfg, const std::string& what) {
    cfg.frame_layout = sym.emulator() ? sym.emulator()->frame_layout : 0;
    std::string native = "Erlang frames only";
    if (cfg.max_native_frames || !cfg.blame_ranges.empty()) {
        uint64_t t0 = monotonic_ns();
        unwind.emplace(vm.pid());
        cfg.unwind = &*unwind;
        sym.set_unwind(&*unwind);
        native = fmt::format("native frames from {} unwind rows of {} files ({}, {:.0f} ms)", unwind->rows().size(),
                             unwind->modules().size(), human_bytes(unwind->table_bytes()),
                             (monotonic_ns() - t0) / 1e6);
    }
    sampler.emplace(vm, cfg);
    start_ns = monotonic_ns();
    start_unix_ns = unix_now_ns();
    auto c = sampler->counters();
    sym.follow_code_events(c.code_events_off.empty(), monotonic_ns());
    if (!c.code_events_off.empty())
        fmt::print(stderr, "beam-bpf: warning: code loads and purges are timed by re-reading the module list ({}); "
                           "a sample in code reloaded within about a second may go unnamed, or be named from the version before\n", c.code_events_off);
    fmt::print(stderr,
               "beam-bpf: attached to {} (pid {}, {}, build-id {}), offsets from {}, {} JIT modules{}, {}, {}\n",
               vm.exe(), vm.pid(), vm.build().describe(), vm.elf().build_id(), vm.offsets().origin,
               sym.jit().module_count(), cfg.frame_layout == 1 ? " (frame pointers)" : "", native, what);
    if (unwind)
        for (const auto& why : unwind->skipped()) fmt::print(stderr, "beam-bpf: warning: no native frames through {}\n", why);
    if (!vm.caveat().empty()) fmt::print(stderr, "beam-bpf: warning: {}\n", vm.caveat());
    if (!names.unavailable().empty())
        fmt::print(stderr, "beam-bpf: warning: processes are shown by pid only: {}\n", names.unavailable());
}

std::string sched_name(uint8_t type, uint16_t no) {
    switch (type) {
    case BB_SCHED_NORMAL: return fmt::format("scheduler {}", no);
    case BB_SCHED_DIRTY_CPU: return fmt::format("dirty cpu scheduler {}", no);
    case BB_SCHED_DIRTY_IO: return fmt::format("dirty io scheduler {}", no);
    default: return "";
    }
}

Reporter::Reporter(Session& s, const CommonOptions& o, const char* unit, TopOptions top)
    : s_(s), o_(o), unit_(unit), weigh_words_(std::string_view(unit) == "words"), top_(top),
      interval_start_ns_(s.start_ns) {}

void Reporter::tick(uint64_t now_ns) {
    if (o_.every > 0 && now_ns - interval_start_ns_ >= static_cast<uint64_t>(o_.every * 1e9)) write(now_ns);
}

void Reporter::finish(uint64_t now_ns) { write(now_ns); }

void Reporter::add(const bb_record& r, std::span<const uint32_t> frames) {
    Who who = who_of(r);
    if (who.erl_pid) s_.names.name(r);  // read now, while the process is likely alive
    // An allocation profile weighs each record by the words the code on its stack allocated.
    if (weigh_words_ && r.alloc_words == 0) return;  // only fragments counted apart
    agg_.add(frames, weigh_words_ ? r.alloc_words : 1, who);
}

void Reporter::write(uint64_t now_ns) {
    ProfileMeta m;
    m.title = fmt::format("{} {} (OTP {})", s_.vm.exe(), s_.vm.pid(), s_.vm.release().major);
    m.unit = unit_;
    // A cpu-clock sample stands for 1/F s (or --period ns) of CPU time; cycles and calls are
    // counts only.
    if (m.unit == "samples" && o_.event == "cpu-clock")
        m.period_ns = o_.period_ns ? o_.period_ns : 1'000'000'000ull / o_.frequency;
    m.start_unix_ns = s_.start_unix_ns + (interval_start_ns_ - s_.start_ns);
    m.duration_ns = now_ns - interval_start_ns_;
    m.lines = o_.lines;
    m.pid_text = [&](uint64_t pid) { return s_.vm.format_pid(pid); };
    m.process_text = [&](uint64_t pid) { return s_.names.known(pid); };
    if (o_.by_process) m.process_root = [&](uint64_t pid) { return s_.names.root_frame(pid); };
    m.sched_text = [](uint32_t sched) { return sched_name(sched >> 16, sched & 0xffff); };
    Profile p = agg_.profile(s_.sym.frames(), m);
    if (o_.every > 0) s_.out.open(m.start_unix_ns);
    for (Format f : s_.out.formats()) {
        std::ostream& os = s_.out.stream(f);
        if (f == Format::top && !heading_.empty()) os << heading_ << "\n";
        write_report(p, f, os, top_);
        os.flush();
        if (!os) throw UserError(fmt::format("cannot write the {} report: {}", file_suffix(f) + 1, std::strerror(errno)));
    }
    if (o_.every > 0)
        for (const auto& path : s_.out.paths()) fmt::print(stderr, "beam-bpf: wrote {} ({} {})\n", path, agg_.total(), unit_);
    agg_.clear();
    interval_start_ns_ = now_ns;
}

RunStats run_loop(Session& s, const CommonOptions& o,
                  const std::function<void(const bb_record&, std::span<const uint32_t>)>& on_stack,
                  const std::function<bool()>& done, const std::function<void(uint64_t)>& tick) {
    struct sigaction sa{};
    sa.sa_handler = on_signal;  // no SA_RESTART: Ctrl-C must end the wait at once
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);

    const Vm& vm = s.vm;
    Sampler& sampler = *s.sampler;
    Symbolizer& sym = s.sym;
    const std::optional<uint64_t> only_pid = s.only_pid;
    const PidLayout& pids = vm.release().pids;
    RunStats st;
    std::vector<uint32_t> frames;
    uint64_t start = monotonic_ns(), last_vm_check = start;
    auto handle = [&](const bb_record& r) {
        if (r.where == BB_WHERE_CODE_EVENT) return sym.code_event(r);
        if (only_pid && (r.erl_pid & pids.mask()) != *only_pid) return;
        if (st.records++ == 0) st.first_record_s = (monotonic_ns() - g_launch_ns) / 1e9;
        st.alloc_words += r.alloc_words;
        st.frag_words += r.frag_words;
        if (r.flags & BB_F_TRUNCATED) st.truncated++;
        if (r.flags & BB_F_BAD_PROC) st.unreadable++;
        if (r.flags & BB_F_NOT_RUNNING) st.not_running++;
        if (r.flags & BB_F_FP_WALK) st.fp_walked++;
        st.native_frames += r.nnative;
        if (r.flags & BB_F_NATIVE_NO_ROW) st.native_no_row++;
        if (r.flags & BB_F_NATIVE_BAD) st.native_bad++;
        if (r.flags & BB_F_NATIVE_TRUNCATED) st.native_truncated++;
        if (r.flags & BB_F_BLAME_SCAN) st.blame_scan++;
        sym.frames(r, frames);
        on_stack(r, frames);
    };
    for (bool stop = false;;) {
        stop = stop || g_stop || (done && done());
        uint64_t now = monotonic_ns();
        if (o.duration > 0 && now - start >= uint64_t(o.duration * 1e9)) stop = true;
        // After attach nothing may lose the profile collected so far: an error ends the run
        // and is reported with what was collected.
        try {
            if (now - last_vm_check > 1000000000ull) {
                last_vm_check = now;
                if (!vm.alive()) {
                    st.vm_exited = true;
                    stop = true;
                } else {
                    sampler.refresh_vm_state();
                    // A lost code event leaves the index behind: back to walking the list.
                    if (sampler.counters().code_events_lost) sym.follow_code_events(false, now);
                }
            }
            // Code loaded or purged since the last drain must be known before its samples are
            // symbolized; records still in the ring were all taken before `now`.
            sym.refresh(now);
            if (stop) sampler.stop_events();  // then the last drain reads every record emitted
            else if (tick) tick(now);
            sampler.poll(stop ? std::chrono::milliseconds(0) : std::chrono::milliseconds(100), handle);
        } catch (const std::exception& e) {
            if (!stop) {
                st.error = e.what();
                stop = true;
                continue;  // still stop the events and drain what is in the ring
            }
            if (st.error.empty()) st.error = e.what();
        }
        if (stop) break;
    }
    st.interrupted = g_stop;
    st.seconds = (monotonic_ns() - start) / 1e9;
    return st;
}

void print_summary(const RunStats& s, const SamplerCounters& c, const Symbolizer& sym, const char* what) {
    fmt::print(stderr,
               "beam-bpf: {} {} in {:.1f} s, {} dropped, {} truncated, {} unsymbolized frames, "
               "{} unreadable processes{}{}{}\n",
               s.records, what, s.seconds, c.dropped, s.truncated, sym.unsymbolized(), s.unreadable,
               s.vm_exited ? "; the VM exited during the run, this is what was collected" : "",
               c.handler_errors ? fmt::format("; {} records lost to errors (first: {})", c.handler_errors,
                                              c.first_handler_error)
                                : "",
               s.error.empty() ? "" : "; stopped early: " + s.error + ", this is what was collected");
}

void write_stats(const CommonOptions& o, const RunStats& s, const SamplerCounters& c, const Symbolizer& sym) {
    if (o.stats_file.empty()) return;
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    nlohmann::json j = {
        {"records", s.records},
        {"seconds", s.seconds},
        {"first_record_s", s.first_record_s},
        {"seen", c.seen},
        {"event", o.event},
        {"events", c.events},
        {"bpf_prog_run_cnt", c.prog_run_cnt},
        {"emitted", c.emitted},
        {"dropped", c.dropped},
        {"filtered", c.filtered},
        {"truncated", s.truncated},
        {"unreadable", s.unreadable},
        {"not_running", s.not_running},
        {"alloc_words", s.alloc_words},
        {"message_words", s.frag_words},
        {"handler_errors", c.handler_errors},
        {"code_events", c.code_events},
        {"code_events_lost", c.code_events_lost},
        {"fp_walked", s.fp_walked},
        {"native_frames", s.native_frames},
        {"native_unwind_stopped", s.native_no_row + s.native_bad + s.native_truncated},
        {"native_no_row", s.native_no_row},
        {"native_bad_rule", s.native_bad},
        {"native_truncated", s.native_truncated},
        {"blame_by_scan", s.blame_scan},
        {"unwind_rows", sym.unwind() ? sym.unwind()->rows().size() : 0},
        {"unwind_files", sym.unwind() ? sym.unwind()->modules().size() : 0},
        {"unwind_table_bytes", sym.unwind() ? sym.unwind()->table_bytes() : 0},
        {"unwind_skipped", sym.unwind() ? sym.unwind()->skipped() : std::vector<std::string>{}},
        {"unsymbolized_frames", sym.unsymbolized()},
        {"bpf_walk_ns_total", c.walk_ns},
        {"bpf_walk_ns_mean", c.seen ? double(c.walk_ns) / c.seen : 0.0},
        {"bpf_walk_ns_log2_hist", c.walk_hist},
        // Of the handler time, what unwinding native frames took: per native frame.
        {"bpf_native_walk_ns_total", c.native_walk_ns},
        {"bpf_ns_per_native_frame", s.native_frames ? double(c.native_walk_ns) / s.native_frames : 0.0},
        {"peak_rss_kib", ru.ru_maxrss},
        {"user_cpu_s", ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6},
        {"sys_cpu_s", ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6},
        {"jit_modules", sym.jit().module_count()},
        {"vm_exited", s.vm_exited},
    };
    std::ofstream f(o.stats_file);
    f << j.dump(2) << "\n";
    if (!f) throw UserError(fmt::format("cannot write {}", o.stats_file));
}

int guarded_main(const char* prog, const std::function<int()>& body) {
    try {
        return body();
    } catch (const UserError& e) {
        fmt::print(stderr, "{}: error: {}\n", prog, e.what());
    } catch (const std::exception& e) {
        fmt::print(stderr, "{}: error: {}\n", prog, e.what());
    }
    return 1;
}

}  // namespace bb
