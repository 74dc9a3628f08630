// beam-bpf-agent as an operator leaves it running as root: its configuration checked value by
// value, its secrets (credentials, headers) never in argv, logs, --check, stats, metrics or
// files, its profiles private even of VMs other users run, and its directory bounded while VMs
// come and go. Real VMs, real BPF, the real agent; stores are tests/agent's stand-ins.
#include <signal.h>
#include <sys/stat.h>

#include <regex>
#include <set>

#include "agent_fixtures.hpp"
#include "harness.hpp"

namespace bbt {
namespace agent_ops_test {

class AgentOpsTest : public RootTest {};

// Each bad value or combination: a non-zero exit and one line that names the option, before
// anything is attached (--check needs no VM).
TEST(AgentConfigTest, EachBadValueIsRefusedInOneLine) {
    TempDir tmp;
    const std::string conf_dir = tmp.path.string();
    const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
        {{"--every", "nan"}, "every"},
        {{"--every", "inf"}, "every"},
        {{"--every", "0.5"}, "every"},
        {{"--every", "1e9"}, "every"},
        {{"--max-backoff", "0"}, "max-backoff"},
        {{"--max-backoff", "nan"}, "max-backoff"},
        {{"--queue-bytes", "0"}, "queue-bytes"},
        {{"--retention-age", "1"}, "retention-age"},
        {{"--retention-bytes", "5"}, "retention-bytes"},
        {{"--native-depth", "100000"}, "native-depth"},
        {{"-F", "0"}, "-F"},
        {{"--push-tries", "0"}, "push-tries"},
        {{"--config", conf_dir}, "configuration"},
        {{"--stats", "/nonexistent/x.json"}, "--stats"},
        {{"--otlp-header", "X-Api-Key: k"}, "otlp-headers-file"},
        {{"--otlp-headers-file", "/etc/h"}, "needs --otlp"},
        {{"--push-auth", "/etc/a"}, "needs --push"},
        {{"--ca-file", "/etc/ca.pem"}, "needs --push or --otlp"},
        {{"--push", "http://x:1", "--client-key", "/k"}, "needs --client-cert"},
        {{"--alloc-period", "4096"}, "cpu,alloc"},
        {{"--watchpoints-in-vm", "true"}, "cpu,alloc"},
        {{"--process-label-cap", "5"}, "needs --process-labels"},
        {{"--process-labels", "all"}, "none or registered"},
        {{"--target-names", "maybe"}, "true or false"},
        {{"--output-group", "no-such-group-bb"}, "no such group"},
        {{"--output", "none", "--retention", "5", "--push", "http://x:1"}, "not with --output none"},
        {{"--push", "ftp://x"}, "http://"},
        {{"--push", "http://alice:s3cret@host:4040"}, "holds credentials"},
        {{"--frobnicate", "1"}, "frobnicate"},
    };
    for (const auto& [args, needle] : bad) {
        std::vector<std::string> argv = {"--check"};
        argv.insert(argv.end(), args.begin(), args.end());
        ToolResult r = run_tool("beam-bpf-agent", argv, 20s);
        SCOPED_TRACE(args[0] + " " + args[1]);
        EXPECT_NE(r.exit_code, 0) << describe(r);
        auto lines = lines_of(r.err);
        ASSERT_EQ(lines.size(), 1u) << describe(r);
        EXPECT_NE(lines[0].find(needle), std::string::npos) << lines[0];
        EXPECT_EQ(lines[0].find("s3cret"), std::string::npos) << "the refusal repeats the password: " << lines[0];
    }
}

// The files a tree holds, with their modes: every directory and file under `root`.
std::map<fs::path, mode_t> modes_under(const fs::path& root) {
    std::map<fs::path, mode_t> out;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(root, ec); it != fs::recursive_directory_iterator();
         it.increment(ec)) {
        struct stat st;
        if (lstat(it->path().c_str(), &st) == 0) out[it->path()] = st.st_mode;
    }
    return out;
}

// Credentials from files only: a Pyroscope bearer token and an OTLP API key header. The secrets
// reach the stores (the OTLP stand-in keeps the headers it got) and nothing else: no process's
// command line (ps), not the agent's stderr, not --check, --stats, /metrics, nor its files.
// The VM is run by `nobody`: its profiles are 0600 in 0700 directories all the same.
TEST_F(AgentOpsTest, SecretsStayInTheirFilesAndProfilesArePrivate) {
    TempDir tmp;
    const fs::path out = tmp.path / "profiles", stats = tmp.path / "stats.json", port_file = tmp.path / "port",
                   recv_p = tmp.path / "pyroscope", recv_o = tmp.path / "otlp",
                   auth = tmp.path / "pyroscope.credentials", headers = tmp.path / "otlp.headers";
    const std::string token = "tok-7f3a9c1e5b", api_key = "key-2d8e6b4f0a";
    fs::create_directories(recv_p);
    fs::create_directories(recv_o);
    auto write_secret = [](const fs::path& p, const std::string& text) {
        std::ofstream(p) << text;
        fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
    };
    write_secret(auth, "Bearer " + token + "\n");
    write_secret(headers, "X-Api-Key: " + api_key + "\n");
    auto pyroscope = start_receiver("pyroscope_receiver.py", {"--out", recv_p.string(), "--port", "0"}, port_file);
    const std::string p_port = slurp(port_file);
    auto otlp = start_receiver("otlp_receiver.py",
                               {"--out", recv_o.string(), "--proto-dir", std::string(BB_SOURCE_DIR) + "/proto",
                                "--port", "0"},
                               port_file);
    const std::string o_port = slurp(port_file);
    const std::vector<std::string> args = {"--every",
                                           "2",
                                           "--output",
                                           out.string(),
                                           "--stats",
                                           stats.string(),
                                           "--metrics",
                                           "0",
                                           "--match",
                                           "bbops_nobody",
                                           "--push",
                                           "http://127.0.0.1:" + p_port,
                                           "--push-auth",
                                           auth.string(),
                                           "--otlp",
                                           "http://127.0.0.1:" + o_port,
                                           "--otlp-headers-file",
                                           headers.string()};
    auto no_secret = [&](const std::string& where, const std::string& text) {
        EXPECT_EQ(text.find(token), std::string::npos) << "the token is in " << where;
        EXPECT_EQ(text.find(api_key), std::string::npos) << "the API key is in " << where;
    };
    std::vector<std::string> check_args = args;
    check_args.insert(check_args.begin(), "--check");
    ToolResult check = run_tool("beam-bpf-agent", check_args, 20s);
    ASSERT_EQ(check.exit_code, 0) << describe(check);
    EXPECT_EQ(check.err, "") << "0600 secret files: no warning";
    no_secret("--check", check.out + check.err);

    // A VM of another user, marked on its command line for --match.
    TestVm as_nobody = debian_vm();
    as_nobody.launcher = {"setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", as_nobody.bin_dir + "/erl"};
    ErlVm vm(as_nobody, "bb_work:main(busy2)", {"-bbops_nobody"});
    vm.wait_line("ready", 60s);
    RunningTool agent = start_tool("beam-bpf-agent", args);
    std::string err;
    ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(vm.os_pid()) + ",", 30s, &err)) << err;
    // Until both stores have two profiles.
    auto count = [](const fs::path& d, const std::string& suffix) {
        size_t n = 0;
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(d, ec)) n += e.path().string().ends_with(suffix);
        return n;
    };
    for (int i = 0; i < 200 && (count(recv_p, ".pb.gz") < 2 || count(recv_o, ".pb") < 2); i++)
        std::this_thread::sleep_for(100ms);
    ASSERT_GE(count(recv_o, ".pb"), 2u);
    ASSERT_GE(count(recv_p, ".pb.gz"), 2u);
    // ps: every process's command line, the agent's included.
    ToolResult ps = run_command({"ps", "-eo", "args"}, 10s);
    ASSERT_EQ(ps.exit_code, 0);
    EXPECT_NE(ps.out.find("--otlp-headers-file"), std::string::npos) << "ps did not list the agent";
    no_secret("ps", ps.out);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(agent.err, m, std::regex(R"(metrics on (http://127\.0\.0\.1:\d+/metrics))")))
        << agent.err;
    ToolResult metrics = get_metrics(m[1].str());
    ASSERT_EQ(metrics.exit_code, 0) << describe(metrics);
    no_secret("/metrics", metrics.out);
    ToolResult stopped = finish_tool(agent, true);
    no_secret("the agent's stderr", stopped.err);
    no_secret("--stats", slurp(stats));

    // The stores got the secrets: the OTLP stand-in keeps each request's headers.
    std::string got_headers;
    for (const auto& e : fs::directory_iterator(recv_o))
        if (e.path().extension() == ".json") got_headers += slurp(e.path());
    EXPECT_NE(got_headers.find(api_key), std::string::npos) << "the API key did not reach the OTLP store";

    // Every file the agent wrote: private, and free of secrets.
    size_t files = 0;
    for (const auto& [path, mode] : modes_under(out)) {
        if (S_ISDIR(mode)) {
            EXPECT_EQ(mode & 07777, 0700u) << path;
        } else {
            EXPECT_EQ(mode & 07777, 0600u) << path;
            no_secret(path.string(), slurp(path));
            files++;
        }
    }
    EXPECT_GE(files, 2u);
    struct stat st;
    ASSERT_EQ(stat(stats.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << "--stats";
    // Readable by others, a secret file is said at the start (and the agent goes on).
    fs::permissions(headers, fs::perms::others_read, fs::perm_options::add);
    ToolResult warned = run_tool("beam-bpf-agent", check_args, 20s);
    EXPECT_EQ(warned.exit_code, 0) << describe(warned);
    EXPECT_NE(warned.err.find("--otlp-headers-file " + headers.string() + ": readable by every user (mode 0604)"),
              std::string::npos)
        << describe(warned);
    no_secret("the warning", warned.err);
}

// A store that takes the connection and never answers: a SIGHUP meanwhile does not hold up the
// files (a new profile each second goes on being written), and SIGTERM ends the agent within
// the 5 s docs/agent.md promises, measured from the signal to its exit.
TEST_F(AgentOpsTest, AStoreThatNeverAnswersHoldsUpNeitherReloadNorStop) {
    TempDir tmp;
    const fs::path out = tmp.path / "profiles", port_file = tmp.path / "port", log = tmp.path / "requests.log";
    auto store = start_receiver("faulty_store.py", {"--log", log.string(), "--port", "0", "--hang"}, port_file);
    ErlVm vm(debian_vm(), "bb_work:main(busy2)", {"-bbops_hang"});
    vm.wait_line("ready", 60s);
    // clang-format off
    RunningTool agent = start_tool("beam-bpf-agent", {"--every", "1", "--output", out.string(), "--match", "bbops_hang",
                                                      "--push", "http://127.0.0.1:" + slurp(port_file)});
    // clang-format on
    std::string err;
    ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(vm.os_pid()) + ",", 30s, &err)) << err;
    auto files = [&] {
        size_t n = 0;
        std::error_code ec;
        for (auto it = fs::recursive_directory_iterator(out, ec); it != fs::recursive_directory_iterator();
             it.increment(ec))
            n += it->path().string().ends_with(".pb.gz");
        return n;
    };
    for (int i = 0; i < 100 && !fs::exists(log); i++) std::this_thread::sleep_for(100ms);
    ASSERT_TRUE(fs::exists(log)) << "no request reached the store";  // one is in flight, hanging
    kill(agent.pid, SIGHUP);
    const size_t at_reload = files();
    std::this_thread::sleep_for(2500ms);
    EXPECT_GE(files(), at_reload + 2) << "profiles stopped while a request hung after SIGHUP";
    const auto signalled = std::chrono::steady_clock::now();
    kill(agent.pid, SIGTERM);
    ToolResult r = finish_tool(agent, false, 30s);
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - signalled).count();
    std::cout << "SIGTERM with a request hanging: the agent exited in " << took << " s\n";
    EXPECT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_LT(took, 5.0) << r.err;
    EXPECT_NE(r.err.find("left unsent"), std::string::npos) << r.err;
}

// VMs that come and go every few seconds for 30 s, profiled each second, files kept 10 s: the
// directories of exited VMs go with their last file, and the directory ends with none of them.
TEST_F(AgentOpsTest, DirectoriesOfExitedVmsAgeOut) {
    TempDir tmp;
    const fs::path out = tmp.path / "profiles";
    // clang-format off
    RunningTool agent = start_tool("beam-bpf-agent", {"--every", "1", "--output", out.string(), "--retention-age", "10",
                                                      "--match", "bbops_churn"});
    // clang-format on
    std::string err;
    ASSERT_TRUE(wait_stderr(agent, "started", 10s, &err)) << err;
    auto vm_dirs = [&] {
        size_t n = 0;
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(out, ec)) n += e.is_directory();
        return n;
    };
    size_t vms = 0, most = 0;
    // Churn until five VMs have come and gone with fewer directories than VMs at every reading
    // (an exited VM's directory was removed: what is asserted below), or for 30 s at most.
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < until && !(vms >= 5 && most < vms)) {
        ErlVm vm(debian_vm(), "bb_work:main(busy2)", {"-bbops_churn"});
        vm.wait_line("ready", 60s);
        ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(vm.os_pid()) + ",", 30s, &err)) << err;
        std::this_thread::sleep_for(2500ms);  // a profile or two
        vms++;
        most = std::max(most, vm_dirs());
    }  // each VM killed here
    // The last VM's files are 10 s old within 10 s, and the sweep runs every 10 s.
    size_t left = vm_dirs();
    for (int i = 0; i < 300 && left; i++, left = vm_dirs()) std::this_thread::sleep_for(100ms);
    ToolResult stopped = finish_tool(agent, true);
    std::cout << "retention: " << vms << " VMs came and went; at most " << most << " VM directories at once, " << left
              << " left 30 s after the last exited\n";
    EXPECT_GE(vms, 5u);
    EXPECT_LT(most, vms) << "no directory of an exited VM was ever removed";
    EXPECT_EQ(left, 0u) << stopped.err;
}

}  // namespace agent_ops_test
}  // namespace bbt
