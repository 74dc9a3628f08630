// Children are started with fork/exec (no shell, so arguments reach them verbatim) and talk to
// the test through pipes read with poll().
#include "harness.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <utility>

#include <gtest/gtest.h>

#ifndef BB_BIN_DIR
#error "BB_BIN_DIR must name the build directory holding the tools"
#endif
#ifndef BB_WORKLOAD_DIR
#error "BB_WORKLOAD_DIR must name tests/workloads"
#endif

namespace bbt {
namespace {

using Clock = std::chrono::steady_clock;

// A VM that dies under us must show up as an error from write(), not kill the test binary.
const bool sigpipe_ignored = [] {
    signal(SIGPIPE, SIG_IGN);
    return true;
}();

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what + ": " + strerror(errno)); }

struct Pipe {
    int r = -1, w = -1;
};

Pipe make_pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) fail("pipe2");
    return {fds[0], fds[1]};
}

void close_fd(int& fd) {
    if (fd >= 0) close(fd);
    fd = -1;
}

// What the kernel says a process is doing: its state and, per thread, where it sleeps (wchan and
// kernel stack). For a process that SIGKILL did not end.
std::string kernel_view(pid_t pid) {
    auto slurp = [](const std::string& path) {
        std::ifstream in(path);
        std::ostringstream s;
        s << in.rdbuf();
        return s.str();
    };
    std::string out = "pid " + std::to_string(pid) + ": " + slurp("/proc/" + std::to_string(pid) + "/stat") + "\n";
    std::error_code ec;
    for (const auto& t : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec))
        out += " thread " + t.path().filename().string() + " wchan " + slurp(t.path() / "wchan") + "\n" +
               slurp(t.path() / "stack");
    return out;
}

// SIGKILLs `pid` and reaps it, waiting at most 30 s: a process the kernel keeps (stuck in an
// uninterruptible sleep) fails the test with where it is stuck, instead of hanging the suite
// until ctest's timeout says nothing. Returns its wait status, or nullopt if it did not end.
std::optional<int> kill_and_reap(pid_t pid) {
    kill(pid, SIGKILL);
    const auto deadline = Clock::now() + 30s;
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD)) return status;
        if (Clock::now() >= deadline) break;
        usleep(10000);
    }
    ADD_FAILURE() << "SIGKILL did not end process " << pid << " within 30 s; the kernel's view:\n" << kernel_view(pid);
    return std::nullopt;
}

struct Creds {
    uid_t uid;
    gid_t gid;
};

struct SpawnSpec {
    std::vector<std::string> argv;
    int in = -1, out = -1, err = -1;  // the child's stdin/stdout/stderr; -1: /dev/null
    std::optional<Creds> creds;
    std::vector<std::string> env;  // NAME=value, added to (or replacing) ours
};

// What a child reports through the exec-status pipe when it cannot get as far as exec.
struct ChildFailure {
    int stage;  // index into kStages
    int err;
};
const char* const kStages[] = {"set up stdio", "drop privileges", "set PR_SET_PDEATHSIG", "exec"};

// Forks and execs; returns once the child has exec'd (or throws with why it could not).
// Between fork and exec the child only makes async-signal-safe calls.
pid_t spawn(const SpawnSpec& spec) {
    std::vector<char*> argv, envp;
    for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    for (char** e = environ; *e; ++e) {
        std::string_view name(*e, strcspn(*e, "="));
        bool replaced = std::any_of(spec.env.begin(), spec.env.end(), [&](auto& v) {
            return v.starts_with(name) && v.size() > name.size() && v[name.size()] == '=';
        });
        if (!replaced) envp.push_back(*e);
    }
    for (const auto& v : spec.env) envp.push_back(const_cast<char*>(v.c_str()));
    envp.push_back(nullptr);

    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0) fail("open /dev/null");
    const int in = spec.in >= 0 ? spec.in : devnull;
    const int out = spec.out >= 0 ? spec.out : devnull;
    const int err = spec.err >= 0 ? spec.err : devnull;
    // Closed by a successful exec (O_CLOEXEC): EOF on it means the exec happened.
    Pipe status = make_pipe();
    const pid_t parent = getpid();

    pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) {
        auto die = [&](int stage) {
            ChildFailure f{stage, errno};
            (void)!write(status.w, &f, sizeof f);
            _exit(127);
        };
        // dup2 of an fd onto itself would keep O_CLOEXEC, so move them high first.
        int fds[3] = {fcntl(in, F_DUPFD_CLOEXEC, 10), fcntl(out, F_DUPFD_CLOEXEC, 10), fcntl(err, F_DUPFD_CLOEXEC, 10)};
        for (int i = 0; i < 3; ++i)
            if (fds[i] < 0 || dup2(fds[i], i) < 0) die(0);
        signal(SIGPIPE, SIG_DFL);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, nullptr);
        if (spec.creds) {
            // Leaving uid 0 clears the permitted and effective capability sets.
            gid_t gid = spec.creds->gid;
            if (setgroups(1, &gid) != 0 || setgid(gid) != 0 || setuid(spec.creds->uid) != 0) die(1);
        }
        // After the uid change, which would reset it. A parent that died before this call
        // would not deliver the signal, hence the getppid() check.
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) die(2);
        if (getppid() != parent) _exit(127);
        execvpe(argv[0], argv.data(), envp.data());
        die(3);
    }
    close(devnull);
    close(status.w);
    ChildFailure f{};
    ssize_t n;
    do n = read(status.r, &f, sizeof f);
    while (n < 0 && errno == EINTR);
    close(status.r);
    if (n == ssize_t(sizeof f)) {
        waitpid(pid, nullptr, 0);
        throw std::runtime_error("harness: " + spec.argv[0] + ": cannot " + kStages[f.stage] + ": " + strerror(f.err));
    }
    return pid;
}

// Appends what `fd` has to `buf`; false at EOF (or on a read error).
bool read_into(int fd, std::string& buf) {
    char chunk[65536];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n > 0) {
            buf.append(chunk, size_t(n));
            return true;
        }
        if (n < 0 && errno == EINTR) continue;
        return false;
    }
}

int remaining_ms(Clock::time_point deadline) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    return int(std::max<long>(0, left.count()));
}

// Polls the given fds (skipping closed ones, -1) up to `ms`; reads whatever is ready into the
// matching buffer and closes an fd at EOF.
void pump(std::initializer_list<std::pair<int*, std::string*>> fds, int ms) {
    std::vector<pollfd> pfds;
    for (auto [fd, buf] : fds)
        if (*fd >= 0) pfds.push_back({*fd, POLLIN, 0});
    if (pfds.empty()) {
        if (ms > 0) usleep(useconds_t(ms) * 1000);
        return;
    }
    int r = poll(pfds.data(), pfds.size(), ms);
    if (r <= 0) return;
    for (auto [fd, buf] : fds) {
        if (*fd < 0) continue;
        const int want = *fd;  // (a structured binding cannot be captured before C++20's P1091 in clang 14)
        auto it = std::find_if(pfds.begin(), pfds.end(), [&](auto& p) { return p.fd == want; });
        if (it != pfds.end() && it->revents && !read_into(*fd, *buf)) close_fd(*fd);
    }
}

// A test that sets a BB_INJECT_* fault runs the copy of the tool built with the test hooks
// (build/test-tools/, base/test_hooks.hpp); every other test runs the tool as installed.
std::string tool_path(const std::string& tool) {
    for (char** e = environ; *e; e++)
        if (std::string_view(*e).starts_with("BB_INJECT_")) return tools_dir() + "/test-tools/" + tool;
    return tools_dir() + "/" + tool;
}

std::string joined(const std::vector<std::string>& argv) {
    std::string s;
    for (const auto& a : argv) s += (s.empty() ? "" : " ") + a;
    return s;
}

// Drains the tool's pipes until it has exited and both pipes are closed; SIGKILLs it at
// `deadline`. The pipes are read while we wait, so a chatty tool never blocks on a full pipe.
ToolResult collect(RunningTool& t, Clock::time_point deadline) {
    ToolResult r;
    int status = 0;
    bool exited = false, killed = false;
    for (;;) {
        if (!exited && waitpid(t.pid, &status, WNOHANG) == t.pid) exited = true;
        if (exited && t.out_fd < 0 && t.err_fd < 0) break;
        if (Clock::now() >= deadline) {
            if (exited) break;  // something else holds the pipes open; we have the status
            killed = true;
            status = kill_and_reap(t.pid).value_or(0);
            exited = true;
            deadline = Clock::now() + 2s;  // to read what is still in the pipes
        }
        // Short ticks: a tool that closed its pipes early must still be seen exiting.
        pump({{&t.out_fd, &t.out}, {&t.err_fd, &t.err}}, std::min(20, remaining_ms(deadline)));
    }
    close_fd(t.out_fd);
    close_fd(t.err_fd);
    t.pid = -1;
    r.exit_code = (!killed && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
    r.out = std::move(t.out);
    r.err = std::move(t.err);
    r.seconds = std::chrono::duration<double>(Clock::now() - t.started).count();
    if (!t.stats_file.empty()) {
        std::ifstream in(t.stats_file);
        if (in) r.stats = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
        if (t.stats_owned) std::remove(t.stats_file.c_str());
        t.stats_file.clear();
    }
    return r;
}

RunningTool start_argv(const std::vector<std::string>& argv, const std::optional<std::string>& as_user) {
    SpawnSpec spec;
    spec.argv = argv;
    if (as_user) {
        passwd* pw = getpwnam(as_user->c_str());
        if (!pw) throw std::runtime_error("no such user: " + *as_user);
        spec.creds = Creds{pw->pw_uid, pw->pw_gid};
    }
    Pipe out = make_pipe(), err = make_pipe();
    spec.out = out.w;
    spec.err = err.w;
    RunningTool t;
    t.started = Clock::now();
    try {
        t.pid = spawn(spec);
    } catch (...) {
        close(out.r), close(out.w), close(err.r), close(err.w);
        throw;
    }
    close(out.w);
    close(err.w);
    t.out_fd = out.r;
    t.err_fd = err.r;
    return t;
}

}  // namespace

std::string tools_dir() {
    const char* d = getenv("BB_TOOLS_DIR");
    return d && *d ? d : BB_BIN_DIR;
}

// --- workloads ---------------------------------------------------------------------------

// The tools size their tables to COLUMNS (base/text.hpp): a test sets it where it looks at that,
// never inherits the shell's.
[[maybe_unused]] const bool kNoColumns = (unsetenv("COLUMNS"), true);

std::string sname_node(const std::string& sname) {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    std::string h = host;
    return sname + "@" + h.substr(0, h.find('.'));
}

int free_port() {
    int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0)
        throw std::runtime_error("cannot find a free port");
    close(s);
    return ntohs(a.sin_port);
}

const std::vector<TestVm>& known_vms() {
    static const std::vector<TestVm> vms = [] {
        auto prefix = [](const char* var, const char* dflt) {
            const char* env = getenv(var);
            return std::string(env && *env ? env : dflt);
        };
        const std::string otp27 = prefix("BB_OTP27_PREFIX", "/var/tmp/beam-bpf-otp27/prefix") + "/bin";
        const std::string otp29 = prefix("BB_OTP29_DIR", "/var/tmp/beam-bpf-otp29");
        std::vector<TestVm> base{
            {"otp25", "/usr/bin", {}, 25, false, {}, {}},
            {"otp27", otp27, {}, 27, false, {}, {}},
            {"otp27_lcnt", otp27, {"-emu_type", "lcnt"}, 27, false, {}, {}},
            {"otp29", otp29 + "/stripped/bin", {}, 29, false, {}, {}, /*functions_named=*/false},
            {"otp29_dwarf", otp29 + "/prefix/bin", {}, 29, false, {}, {}},
        };
        std::vector<TestVm> all;
        for (auto fp : {false, true})
            for (TestVm v : base) {
                if (fp) {
                    v.name += "_fp";
                    v.args.insert(v.args.end(), {"+JPperf", "true"});
                    v.frame_pointers = true;
                }
                all.push_back(v);
            }
        return all;
    }();
    return vms;
}

const TestVm& vm_named(const std::string& name) {
    for (const auto& v : known_vms())
        if (v.name == name) return v;
    throw std::runtime_error("no test VM " + name);
}

namespace {
std::vector<TestVm> vms_named(std::initializer_list<const char*> names) {
    std::vector<TestVm> out;
    for (const char* n : names) out.push_back(vm_named(n));
    return out;
}
}  // namespace

const std::vector<TestVm>& test_vms() {
    static const std::vector<TestVm> vms = vms_named(
        {"otp25", "otp25_fp", "otp27", "otp27_lcnt_fp", "otp29", "otp29_dwarf_fp"});
    return vms;
}

const std::vector<TestVm>& release_vms() {
    static const std::vector<TestVm> vms = vms_named({"otp25", "otp27", "otp29"});
    return vms;
}

const std::vector<TestVm>& layout_vms() {
    static const std::vector<TestVm> vms = vms_named({"otp25", "otp27_lcnt_fp", "otp29", "otp29_dwarf_fp"});
    return vms;
}

const std::vector<TestVm>& probe_vms() {
    static const std::vector<TestVm> vms = [] {
        auto v = layout_vms();
        std::erase_if(v, [](const TestVm& t) { return !t.functions_named; });
        return v;
    }();
    return vms;
}

const TestVm& debian_vm() { return test_vms().front(); }

void PrintTo(const TestVm& vm, std::ostream* os) { *os << vm.name; }

std::string test_vm_name(const ::testing::TestParamInfo<TestVm>& info) { return info.param.name; }

// The workloads' .beam files for one erlc, compiled once per suite rather than once per test
// process (ctest runs every test in a process of its own: compiling 21 modules each time cost
// about a second a test). The directory's name is a hash of what the files depend on (the
// erlc, its install's mtime, every workload's text), so an edited workload or a rebuilt VM gets
// a new one; it is made under a temporary name and renamed into place, so that tests running
// at once never see it half-written.
const std::string& workload_beam_dir(const TestVm& vm) {
    static std::map<std::string, std::string> dirs;
    auto& path = dirs[vm.bin_dir];
    if (!path.empty()) return path;
    const std::string erlc = vm.bin_dir + "/erlc";
    if (access(erlc.c_str(), X_OK) != 0)
        throw std::runtime_error("no " + erlc +
                                 ": build the test VMs with scripts/build-test-vms.sh 27 "
                                 "and 29 (scripts/test.sh does)");
    std::error_code ec;
    std::vector<std::filesystem::path> sources;
    for (const auto& e : std::filesystem::directory_iterator(BB_WORKLOAD_DIR))
        if (e.path().extension() == ".erl") sources.push_back(e.path());
    std::sort(sources.begin(), sources.end());
    std::string key = std::filesystem::canonical(erlc, ec).string() + "\n" +
                      std::to_string(std::filesystem::last_write_time(erlc, ec).time_since_epoch().count());
    for (const auto& src : sources) key += "\n" + src.filename().string() + "\n" + read_file(src);
    char name[64];
    snprintf(name, sizeof name, "/tmp/bb-workloads-%d-%016zx", int(getuid()), std::hash<std::string>{}(key));
    // Ours, and writable by nobody else (/tmp is shared); else this process compiles its own.
    auto ours = [](const char* dir) {
        struct stat st {};
        return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == getuid() && !(st.st_mode & 022);
    };
    if (ours(name)) return path = name;
    char tmpl[] = "/tmp/bb-workloads-new-XXXXXX";
    if (!mkdtemp(tmpl)) fail("mkdtemp");
    // Readable by a VM another user runs (the agent's tests start one as nobody).
    chmod(tmpl, 0755);
    std::vector<std::string> argv{erlc, "-o", tmpl};
    for (const auto& src : sources) argv.push_back(src);
    Pipe out = make_pipe();
    RunningTool t;  // not a tool, but collect() fits: pipes, deadline, exit status
    t.started = Clock::now();
    t.pid = spawn({argv, -1, out.w, out.w, std::nullopt, {}});
    close(out.w);
    t.err_fd = out.r;
    ToolResult r = collect(t, Clock::now() + 120s);
    if (r.exit_code != 0) {
        std::filesystem::remove_all(tmpl, ec);
        throw std::runtime_error("`" + joined(argv) + "` failed:\n" + r.err);
    }
    if (rename(tmpl, name) == 0) return path = name;
    // Another test renamed its copy into place first: it serves, and ours goes. (A name taken
    // by something not ours leaves this process its own copy.)
    if (!ours(name)) return path = tmpl;
    std::filesystem::remove_all(tmpl, ec);
    return path = name;
}

// --- ErlVm -------------------------------------------------------------------------------

ErlVm::ErlVm(const TestVm& vm, const std::string& eval_expr, std::vector<std::string> extra_args) {
    SpawnSpec spec;
    spec.argv = vm.launcher.empty() ? std::vector<std::string>{vm.bin_dir + "/erl"} : vm.launcher;
    spec.argv.insert(spec.argv.end(), {"-noshell", "-pa", workload_beam_dir(vm)});
    spec.argv.insert(spec.argv.end(), vm.args.begin(), vm.args.end());
    spec.argv.insert(spec.argv.end(), extra_args.begin(), extra_args.end());
    spec.argv.insert(spec.argv.end(), {"-eval", eval_expr});
    spec.env = vm.env;
    spec.env.push_back("ERL_CRASH_DUMP_SECONDS=0");  // no erl_crash.dump in the test's directory
    Pipe in = make_pipe(), out = make_pipe();
    spec.in = in.r;
    spec.out = spec.err = out.w;
    try {
        pid_ = spawn(spec);
    } catch (...) {
        close(in.r), close(in.w), close(out.r), close(out.w);
        throw;
    }
    close(in.r);
    close(out.w);
    in_fd_ = in.w;
    out_fd_ = out.r;
}

ErlVm::~ErlVm() {
    const pid_t vm = pid_;
    kill_now();
    close_fd(in_fd_);
    close_fd(out_fd_);
    // What a VM started with +JPperf leaves in /tmp (its perf map, its jitdump): a suite's
    // hundreds of VMs would fill it.
    if (vm > 0)
        for (const char* kind : {"/tmp/perf-", "/tmp/jit-"})
            unlink((kind + std::to_string(vm) + (kind[5] == 'p' ? ".map" : ".dump")).c_str());
}

void ErlVm::kill_now() {
    if (pid_ > 0 && !reaped_) {
        kill_and_reap(pid_);
        reaped_ = true;
    }
}

std::string ErlVm::wait_line(const std::string& prefix, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    for (;;) {
        for (size_t nl; (nl = buf_.find('\n')) != std::string::npos;) {
            std::string line = buf_.substr(0, nl);
            buf_.erase(0, nl + 1);
            if (line.starts_with(prefix)) return line;
        }
        if (out_fd_ < 0)
            throw std::runtime_error("VM " + std::to_string(pid_) + " exited before printing '" + prefix +
                                     "'; its output:\n" + seen_);
        if (Clock::now() >= deadline)
            throw std::runtime_error("VM " + std::to_string(pid_) + " did not print '" + prefix + "' within " +
                                     std::to_string(timeout.count()) + " ms; its output:\n" + seen_);
        std::string got;
        pump({{&out_fd_, &got}}, remaining_ms(deadline));
        buf_ += got;
        seen_ += got;
    }
}

void ErlVm::send_line(const std::string& line) {
    std::string data = line + "\n";
    for (size_t off = 0; off < data.size();) {
        ssize_t n = write(in_fd_, data.data() + off, data.size() - off);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail("write to VM " + std::to_string(pid_));
        off += size_t(n);
    }
}

// --- tools -------------------------------------------------------------------------------

RunningTool::RunningTool(RunningTool&& o) noexcept { *this = std::move(o); }

// Kills and reaps a tool nobody collected.
static void discard(RunningTool& t) {
    if (t.pid > 0) {
        kill_and_reap(t.pid);
        t.pid = -1;
    }
    close_fd(t.out_fd);
    close_fd(t.err_fd);
}

RunningTool& RunningTool::operator=(RunningTool&& o) noexcept {
    if (this != &o) {
        discard(*this);
        pid = std::exchange(o.pid, -1);
        out_fd = std::exchange(o.out_fd, -1);
        err_fd = std::exchange(o.err_fd, -1);
        out = std::move(o.out);
        err = std::move(o.err);
        started = o.started;
        stats_file = std::move(o.stats_file);
        stats_owned = o.stats_owned;
    }
    return *this;
}

RunningTool::~RunningTool() { discard(*this); }

RunningTool start(const std::string& tool, const std::vector<std::string>& args,
                  const std::optional<std::string>& as_user) {
    std::vector<std::string> argv{tool_path(tool)};
    argv.insert(argv.end(), args.begin(), args.end());
    // The figures tests check come from --stats, not from the summary's prose.
    std::string stats;
    bool own = true;
    const bool profiler = tool == "beam-bpf-sample" || tool == "beam-bpf-blame";
    if (auto given = std::find(args.begin(), args.end(), "--stats"); given != args.end()) {
        if (given + 1 != args.end()) stats = *(given + 1);  // the test's own: read, not removed
        own = false;
    } else if (profiler && std::find(args.begin(), args.end(), "--help") == args.end()) {
        static int serial = 0;
        stats = "/tmp/bb-test-stats-" + std::to_string(getpid()) + "-" + std::to_string(serial++) + ".json";
        std::remove(stats.c_str());
        argv.insert(argv.end(), {"--stats", stats});
    }
    RunningTool t = start_argv(argv, as_user);
    t.stats_file = stats;
    t.stats_owned = own;
    return t;
}

ToolResult run_tool(const std::string& tool, const std::vector<std::string>& args, std::chrono::milliseconds timeout,
                    const std::optional<std::string>& as_user) {
    RunningTool t = start(tool, args, as_user);
    return collect(t, t.started + timeout);
}

ToolResult run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
    RunningTool t = start_argv(argv, std::nullopt);
    return collect(t, t.started + timeout);
}

RunningTool start_tool(const std::string& tool, const std::vector<std::string>& args) {
    return start(tool, args, std::nullopt);
}

RunningTool start_tool_under(const std::vector<std::string>& wrapper, const std::string& tool,
                             const std::vector<std::string>& args) {
    std::vector<std::string> argv = wrapper;
    argv.push_back(tool_path(tool));
    argv.insert(argv.end(), args.begin(), args.end());
    return start_argv(argv, std::nullopt);
}

bool wait_stderr(RunningTool& t, const std::string& marker, std::chrono::milliseconds timeout,
                 std::string* err_so_far) {
    const auto deadline = Clock::now() + timeout;
    bool found;
    while (!(found = t.err.find(marker) != std::string::npos) && t.err_fd >= 0 && Clock::now() < deadline)
        pump({{&t.out_fd, &t.out}, {&t.err_fd, &t.err}}, remaining_ms(deadline));
    if (err_so_far) *err_so_far = t.err;
    return found;
}

ToolResult finish_tool(RunningTool& t, bool send_sigint, std::chrono::milliseconds timeout) {
    if (t.pid <= 0) throw std::logic_error("finish_tool: tool not running");
    if (send_sigint) kill(t.pid, SIGINT);  // harmless if it has exited but is not yet reaped
    return collect(t, Clock::now() + timeout);
}

// --- output parsing ----------------------------------------------------------------------

SchedStats schedstat(pid_t pid) {
    SchedStats out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/task", ec)) {
        std::ifstream f(e.path() / "schedstat");
        double cpu = 0, rq = 0;
        if (f >> cpu >> rq) out[std::stol(e.path().filename())] = {cpu, rq};
    }
    return out;
}

double steal_ns() {
    std::ifstream f("/proc/stat");
    std::string cpu;
    double v[8] = {};
    f >> cpu;
    for (double& x : v) f >> x;  // user nice system idle iowait irq softirq steal, in clock ticks
    return v[7] * 1e9 / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double run_queue_waits(const SchedStats& before, const SchedStats& after) {
    double ns = 0;
    for (const auto& [tid, b] : before)
        if (auto a = after.find(tid); a != after.end()) ns += a->second.second - b.second;
    return ns;
}

std::map<std::string, long> parse_folded(const std::string& text) {
    std::map<std::string, long> stacks;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        size_t sp = line.rfind(' ');
        bool ok = sp != std::string::npos && sp > 0 && sp + 1 < line.size() &&
                  std::all_of(line.begin() + long(sp) + 1, line.end(), [](unsigned char c) { return std::isdigit(c); });
        if (!ok) {
            ADD_FAILURE() << "malformed folded line: '" << line << "'";
            continue;
        }
        stacks[line.substr(0, sp)] += std::stol(line.substr(sp + 1));
    }
    return stacks;
}

std::vector<std::string> split_frames(const std::string& stack) {
    std::vector<std::string> frames;
    size_t start = 0;
    for (;;) {
        size_t semi = stack.find(';', start);
        frames.push_back(stack.substr(start, semi - start));
        if (semi == std::string::npos) return frames;
        start = semi + 1;
    }
}

std::optional<long> stat(const ToolResult& r, const std::string& key) {
    if (!r.stats.is_object() || !r.stats.contains(key) || !r.stats[key].is_number()) return std::nullopt;
    return r.stats[key].get<long>();
}

// --- other processes ---------------------------------------------------------------------

ChildProcess::ChildProcess(const std::vector<std::string>& argv) {
    pid_ = spawn({argv, -1, -1, STDERR_FILENO, std::nullopt, {}});
}

ChildProcess::~ChildProcess() { kill_and_reap(pid_); }

pid_t dead_pid() {
    pid_t pid = fork();
    if (pid < 0) fail("fork");
    if (pid == 0) _exit(0);
    waitpid(pid, nullptr, 0);
    return pid;
}

// For assertion messages: how the tool ended and what it said.
std::string describe(const ToolResult& r) {
    std::ostringstream s;
    s << "exit code " << r.exit_code << " after " << r.seconds << " s\n--- stderr:\n"
      << r.err << "--- stdout (first 2000 chars):\n"
      << r.out.substr(0, 2000);
    return s.str();
}

std::string expect_one_line_error(const ToolResult& r, const std::string& tool) {
    EXPECT_GT(r.exit_code, 0) << describe(r);  // -1 would mean a signal or our timeout
    auto lines = lines_of(r.err);
    EXPECT_EQ(lines.size(), 1u) << describe(r);
    if (lines.size() != 1) return "";
    EXPECT_TRUE(lines[0].starts_with(tool + ": error: ")) << describe(r);
    std::cout << "error line: " << lines[0] << "\n";
    return lines[0];
}

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);)
        if (!l.empty()) lines.push_back(l);
    return lines;
}

void RootTest::SetUp() {
    ASSERT_EQ(geteuid(), 0u) << "the integration tests load BPF programs and attach to "
                                "root-owned VMs: run them as root (they do not skip)";
}

void VmTest::SetUp() {
    ASSERT_EQ(geteuid(), 0u) << "the integration tests load BPF programs and attach to "
                                "root-owned VMs: run them as root (they do not skip)";
    ASSERT_EQ(access((vm().bin_dir + "/erl").c_str(), X_OK), 0)
        << "no " << vm().bin_dir << "/erl: build the test VMs with scripts/build-test-vms.sh 27 and 29";
}

}  // namespace bbt
