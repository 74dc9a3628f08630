// beam-bpf-agent on real VMs with real BPF: three VMs of two tested builds started at different
// times during one agent run (one in its own pid and mount namespace), one killed mid-interval,
// pushes to a receiver that follows Pyroscope's documented ingest API and goes down for a while,
// a SIGHUP reload and a SIGTERM. Every profile is decoded with `go tool pprof`, labels included.
// Then OTLP: two VMs' profiles to a receiver of OTLP/HTTP, decoded with `protoc --decode`.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "agent_fixtures.hpp"
#include "harness.hpp"

namespace bbt {
namespace agent_test {

namespace fs = std::filesystem;

const TestVm& otp27_vm() { return vm_named("otp27"); }

// A sample of `go tool pprof -traces`: its labels, count and frames (leaf first).
struct Trace {
    std::map<std::string, std::string> labels;
    long count = 0;
    std::vector<std::string> frames;
};

// A wall profile's values are nanoseconds: shown as such (-unit=ns), not rounded to "1.2s".
std::vector<Trace> decode(const fs::path& file, const std::string& sample_index = "samples") {
    ToolResult r = run_command({"go", "tool", "pprof", "-traces", "-sample_index=" + sample_index, "-unit=ns",
                                file.string()},
                               60s);
    if (r.exit_code != 0) throw std::runtime_error("go tool pprof -traces " + file.string() + ": " + describe(r));
    std::vector<Trace> out;
    std::optional<Trace> t;
    static const std::regex label(R"(^\s*([A-Za-z_]+):\s+(.*)$)"), first(R"(^\s*(\d+)(?:ns)?\s+(\S.*)$)");
    for (const std::string& line : lines_of(r.out)) {
        if (line.starts_with("-----------")) {
            if (t && t->count) out.push_back(*t);
            t.emplace();
            continue;
        }
        if (!t) continue;  // the header
        std::smatch m;
        if (t->frames.empty() && std::regex_match(line, m, first)) {
            t->count = std::stol(m[1]);
            t->frames.push_back(m[2]);
        } else if (t->frames.empty() && std::regex_match(line, m, label)) {
            t->labels[m[1]] = m[2];
        } else if (!t->frames.empty()) {
            size_t b = line.find_first_not_of(' ');
            if (b != std::string::npos) t->frames.push_back(line.substr(b));
        } else {
            throw std::runtime_error("go tool pprof -traces " + file.string() + ": cannot read the line '" + line +
                                     "'");
        }
    }
    if (t && t->count) out.push_back(*t);
    return out;
}

bool has_frame(const Trace& t, const std::string& prefix) {
    for (const std::string& f : t.frames)
        if (f.starts_with(prefix)) return true;
    return false;
}

// The pid of beam.smp under `parent` (unshare's forked child): the VM in its own namespace.
pid_t beam_child(pid_t parent) {
    for (int i = 0; i < 200; i++) {
        std::string kids = slurp("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) + "/children");
        std::istringstream in(kids);
        pid_t kid = 0;
        if (in >> kid) {
            std::error_code ec;
            std::string exe = fs::read_symlink("/proc/" + std::to_string(kid) + "/exe", ec).string();
            if (exe.find("beam") != std::string::npos) return kid;
        }
        std::this_thread::sleep_for(50ms);
    }
    return -1;
}

// The BPF objects and perf events a process holds: each an anon_inode descriptor. With
// `loaded_only`, its BPF programs and maps alone (what loading a walker creates).
size_t kernel_objects(pid_t pid, bool loaded_only = false) {
    size_t n = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
        std::string link = fs::read_symlink(e.path(), ec).string();
        if (loaded_only) n += link == "anon_inode:bpf-prog" || link == "anon_inode:bpf-map";
        else n += link.starts_with("anon_inode:bpf") || link == "anon_inode:[perf_event]";
    }
    return n;
}

class AgentTest : public RootTest {};

const std::string kThree = "bb_alloc:alloc_three/2", kOne = "bb_alloc:alloc_one/2", kNone = "bb_alloc:alloc_none/2";

TEST_F(AgentTest, ThreeVmsComeAndGoEachGetsItsOwnLabelledProfilesPushedThroughAnOutage) {
    TempDir tmp;
    const fs::path dir = tmp.path, out = dir / "profiles", recv = dir / "received", port_file = dir / "port",
                   stats = dir / "stats.json", cfg = dir / "agent.conf";
    auto start_pyroscope = [&](const std::string& port) {
        return start_receiver("pyroscope_receiver.py", {"--out", recv.string(), "--port", port}, port_file);
    };
    auto receiver_proc = start_pyroscope("0");
    const std::string port = slurp(port_file);
    {
        std::ofstream c(cfg);
        c << "# the agent test's configuration\nservice.bbagent_c=svc_c\nlabel.env=agent_test\n";
    }

    // VM A: Debian's OTP 25, split532 (50/30/20 by construction), started before the agent.
    ErlVm a(debian_vm(), "bb_work:main(split532)", {"-sname", "bbagent_a"});
    a.wait_line("ready", 60s);
    // Only this test's VMs: other VMs on the machine (other tests) are not ours to profile.
    // clang-format off
    RunningTool agent = start_tool(
        "beam-bpf-agent", {"--every", "2", "-F", "499", "--output", out.string(), "--retention", "0", "--push",
                           "http://127.0.0.1:" + port, "--max-backoff", "1", "--queue-bytes", "1", "--match",
                           "bbagent_[abc]", "--stats", stats.string(), "--config", cfg.string(), "--metrics", "0"});
    // clang-format on
    std::string err;
    // Deadlines, not timings: an attach takes about 2 s here, up to 6 s on a loaded machine
    // (bench/agent.py measures it).
    ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(a.os_pid()) + ",", 30s, &err)) << err;
    const double found_a_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - agent.started).count();
    std::cerr << "agent test: VM A attached " << found_a_s << " s after the agent started\n";

    const size_t held_a = kernel_objects(agent.pid), loaded_a = kernel_objects(agent.pid, true);
    EXPECT_GT(loaded_a, 0u);

    // VM B: the stripped OTP 29 build (its globals found in its memory), `deep`, started while
    // the agent runs.
    ErlVm b(vm_named("otp29"), "bb_work:main(deep, 10)", {"-sname", "bbagent_b"});
    b.wait_line("ready", 60s);
    ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(b.os_pid()) + ",", 30s, &err)) << err;
    const size_t held_b = kernel_objects(agent.pid) - held_a;  // B's perf events and code probe
    EXPECT_GT(held_b, 0u);
    // One walker samples A (OTP 25) and B (OTP 29, other offsets): B loaded no program or map.
    EXPECT_EQ(kernel_objects(agent.pid, true), loaded_a);

    // VM C: OTP 25 in its own pid and mount namespace (pid 1 there), busy2.
    TestVm in_ns = debian_vm();
    in_ns.launcher = {"unshare", "-p", "-m", "--fork", "--mount-proc", "--kill-child", in_ns.bin_dir + "/erl"};
    ErlVm c(in_ns, "bb_work:main(busy2)", {"-sname", "bbagent_c", "+S", "1"});
    c.wait_line("ready", 60s);
    const pid_t c_pid = beam_child(c.os_pid());
    ASSERT_GT(c_pid, 0);
    ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(c_pid) + ",", 30s, &err)) << err;
    const size_t held_abc = kernel_objects(agent.pid);
    EXPECT_EQ(kernel_objects(agent.pid, true), loaded_a);

    // B killed mid-interval, once it has written two profiles.
    // Each VM's directory is named after its service: here its node, as node() gives it.
    const fs::path b_dir = out / (sname_node("bbagent_b") + "-" + std::to_string(b.os_pid()));
    auto count_files = [](const fs::path& d) {
        size_t n = 0;
        std::error_code ec;
        for (const auto& e : fs::directory_iterator(d, ec)) n += e.path().string().ends_with(".pb.gz");
        return n;
    };
    for (int i = 0; i < 300 && count_files(b_dir) < 2; i++) std::this_thread::sleep_for(100ms);
    ASSERT_GE(count_files(b_dir), 2u);
    std::this_thread::sleep_for(1s);
    const pid_t b_pid = b.os_pid();
    b.kill_now();
    ASSERT_TRUE(wait_stderr(agent, "detached pid " + std::to_string(b_pid), 10s, &err)) << err;
    // Everything B held is released: its perf events and probe links.
    EXPECT_EQ(kernel_objects(agent.pid), held_abc - held_b);
    std::cerr << "agent test: one walker (" << loaded_a << " BPF programs and maps) for A, B and C; B held " << held_b
              << " perf events and links, released at its exit\n";

    // The store goes down for 6 s (three intervals), then comes back on the same port.
    std::this_thread::sleep_for(2s);
    receiver_proc.reset();
    const size_t before_outage = count_files(recv);
    // SIGHUP meanwhile: A's service name changes from the next profile on.
    {
        std::ofstream c2(cfg);
        // C by its short name, A by its name as node() prints it.
        c2 << "service.bbagent_c=svc_c\nlabel.env=agent_test\nservice." << sname_node("bbagent_a") << "=svc_a2\n";
    }
    // The Prometheus endpoint on localhost, during the outage: A and C followed, pushes failing.
    {
        std::smatch m;
        ASSERT_TRUE(std::regex_search(agent.err, m, std::regex(R"(metrics on (http://127\.0\.0\.1:\d+/metrics))")))
            << agent.err;
        std::this_thread::sleep_for(3s);
        ToolResult got = get_metrics(m[1].str());
        ASSERT_EQ(got.exit_code, 0) << describe(got);
        EXPECT_NE(got.out.find("\nbeam_bpf_agent_vms_followed 2\n"), std::string::npos) << got.out;
        EXPECT_NE(got.out.find("# TYPE beam_bpf_agent_push_failures_total counter\n"), std::string::npos) << got.out;
        std::smatch f;
        ASSERT_TRUE(std::regex_search(got.out, f, std::regex(R"(\nbeam_bpf_agent_push_failures_total (\d+)\n)")))
            << got.out;
        EXPECT_GT(std::stol(f[1]), 0) << got.out;
    }
    kill(agent.pid, SIGHUP);
    ASSERT_TRUE(wait_stderr(agent, "configuration reloaded", 5s, &err)) << err;
    std::this_thread::sleep_for(6s);
    receiver_proc = start_pyroscope(port);
    std::this_thread::sleep_for(5s);

    // SIGTERM: the last interval of each VM is written and pushed, then the agent exits 0.
    kill(agent.pid, SIGTERM);
    ToolResult r = finish_tool(agent, false, 30s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_NE(r.err.find("detached pid " + std::to_string(b_pid) + " (node " + sname_node("bbagent_b") +
                         "): the VM exited"),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("detached pid " + std::to_string(a.os_pid()) + " (node " + sname_node("bbagent_a") +
                         "): the agent stops"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("refused pid"), std::string::npos) << r.err;

    // --- the files: one subdirectory per VM, every profile labelled with its VM -----------
    struct Expect {
        pid_t pid;
        std::string node, otp, dir_prefix;
        std::vector<std::string> own, foreign;  // frames it must show / never
    };
    const std::vector<Expect> vms{
        {a.os_pid(),
         sname_node("bbagent_a"),
         "25",
         sname_node("bbagent_a") + "-",
         {"bb_work:f5/2"},
         {"bb_work:deep_leaf", "bb_work:spin_"}},
        {b_pid,
         sname_node("bbagent_b"),
         "29",
         sname_node("bbagent_b") + "-",
         {"bb_work:deep_leaf"},
         {"bb_work:f5/2", "bb_work:spin_"}},
        {c_pid, sname_node("bbagent_c"), "25", "svc_c-", {"bb_work:spin_a"}, {"bb_work:f5/2", "bb_work:deep_leaf"}},
    };
    std::map<std::string, std::string> file_of_bytes;  // profile bytes -> the file holding them
    size_t files = 0;
    std::map<std::string, long> split;  // A: samples in f5, f3, f2
    size_t a_renamed = 0;
    for (const Expect& e : vms) {
        const fs::path d = out / (e.dir_prefix + std::to_string(e.pid));
        ASSERT_TRUE(fs::is_directory(d)) << d;
        size_t n = 0;
        bool own_seen = false;
        for (const auto& f : fs::directory_iterator(d)) {
            ASSERT_TRUE(f.path().string().ends_with(".pb.gz")) << "a temporary left behind: " << f.path();
            n++;
            files++;
            file_of_bytes[slurp(f.path())] = f.path().string();
            for (const Trace& t : decode(f.path())) {
                EXPECT_EQ(t.labels.count("node") ? t.labels.at("node") : "", e.node) << f.path();
                EXPECT_EQ(t.labels.count("otp_release") ? t.labels.at("otp_release") : "", e.otp) << f.path();
                EXPECT_TRUE(t.labels.count("erts_version") && t.labels.count("host")) << f.path();
                EXPECT_EQ(t.labels.count("env") ? t.labels.at("env") : "", "agent_test") << f.path();
                // Only labels that stay the same across restarts: each distinct set is a series
                // in Pyroscope (pids, cgroup and container go to the OTLP resource alone).
                for (const char* k : {"os_pid", "ns_pid", "cgroup", "container_id", "pid", "process", "scheduler"})
                    EXPECT_FALSE(t.labels.count(k)) << f.path() << " has a sample label " << k;
                if (e.node == sname_node("bbagent_c")) {
                    EXPECT_EQ(t.labels.count("service_name") ? t.labels.at("service_name") : "", "svc_c") << f.path();
                }
                // A service named after the node (the target chose it) says so; a configured one not.
                const std::string service = t.labels.count("service_name") ? t.labels.at("service_name") : "";
                EXPECT_EQ(t.labels.count("service_source") ? t.labels.at("service_source") : "",
                          service == e.node ? "target" : "")
                    << f.path();
                if (e.node == sname_node("bbagent_a") && t.labels.count("service_name") &&
                    t.labels.at("service_name") == "svc_a2")
                    a_renamed++;
                for (const std::string& foreign : e.foreign)
                    EXPECT_FALSE(has_frame(t, foreign)) << f.path() << " holds a sample of another VM: " << foreign;
                own_seen = own_seen || has_frame(t, e.own.front());
                if (e.node == sname_node("bbagent_a") && !t.frames.empty())
                    for (const char* leaf : {"bb_work:f5/2", "bb_work:f3/2", "bb_work:f2/2"})
                        if (t.frames.front().starts_with(leaf)) split[leaf] += t.count;
            }
        }
        EXPECT_GE(n, 2u) << d;
        EXPECT_TRUE(own_seen) << d << " never shows " << e.own.front();
    }
    EXPECT_GT(a_renamed, 0u) << "no profile of A after the reload carries service_name=svc_a2";

    // A's shares: 50/30/20 by construction; the tolerance is at least 3 standard deviations.
    const long total = split["bb_work:f5/2"] + split["bb_work:f3/2"] + split["bb_work:f2/2"];
    const double tol = 5.0;
    ASSERT_LE(3 * 100 * std::sqrt(0.25 / std::max(total, 1L)), tol)
        << total << " samples are too few for a 5-point tolerance";
    std::cerr << "agent test: A's f5/f3/f2 " << 100.0 * split["bb_work:f5/2"] / total << "/"
              << 100.0 * split["bb_work:f3/2"] / total << "/" << 100.0 * split["bb_work:f2/2"] / total << "% of "
              << total << " samples, " << files << " files\n";
    EXPECT_NEAR(100.0 * split["bb_work:f5/2"] / total, 50, tol) << total;
    EXPECT_NEAR(100.0 * split["bb_work:f3/2"] / total, 30, tol) << total;
    EXPECT_NEAR(100.0 * split["bb_work:f2/2"] / total, 20, tol) << total;

    // --- the pushes: Pyroscope's form, the same bytes as the files, losses counted ---------
    nlohmann::json st = nlohmann::json::parse(slurp(stats));
    size_t received = 0, after_outage = 0;
    for (const auto& f : fs::directory_iterator(recv)) {
        if (f.path().extension() != ".json") continue;
        received++;
        nlohmann::json meta = nlohmann::json::parse(slurp(f.path()));
        fs::path body = f.path();
        body.replace_extension(".pb.gz");
        const std::string bytes = slurp(body);
        ASSERT_TRUE(file_of_bytes.count(bytes)) << body << " is no profile the agent wrote";
        const std::string file = file_of_bytes[bytes];
        // The pushed name carries the same VM's labels, and no pid: a restart is the same series.
        EXPECT_FALSE(meta["labels"].contains("os_pid")) << meta.dump();
        const std::string node = meta["labels"].value("node", "");
        EXPECT_TRUE(!node.empty() && file.find("/" + (node == sname_node("bbagent_c") ? std::string("svc_c") : node) +
                                               "-") != std::string::npos)
            << file << " pushed as node " << node << ", " << meta.dump();
        EXPECT_EQ(meta["app"].get<std::string>(), meta["labels"].value("service_name", "")) << meta.dump();
        EXPECT_LE(meta["from"].get<long>(), meta["until"].get<long>());
        EXPECT_TRUE(meta["sample_type_config"].contains("cpu")) << meta.dump();
        decode(body);  // go tool pprof reads what Pyroscope got (its traces were checked in the file)
        if (std::stoul(f.path().stem().string()) >= before_outage) after_outage++;
    }
    std::cerr << "agent test: " << received << " profiles received (" << after_outage << " after the outage), "
              << st["push_dropped"] << " dropped, " << st["push_failures"] << " failed pushes\n";
    EXPECT_GT(after_outage, 0u) << "nothing arrived after the receiver came back";
    EXPECT_GT(st["push_failures"].get<long>(), 0) << st.dump();
    EXPECT_GT(st["push_dropped"].get<long>(), 0) << st.dump();
    EXPECT_EQ(st["push_rejected"].get<long>(), 0) << st.dump();
    EXPECT_EQ(st["queue_profiles"].get<long>(), 0) << st.dump();
    // Every profile written was pushed or counted as dropped: nothing lost silently.
    EXPECT_EQ(files, received + st["push_dropped"].get<size_t>() + st["push_given_up"].get<size_t>()) << st.dump();
    EXPECT_EQ(st["pushes"].get<size_t>(), received) << st.dump();
    EXPECT_EQ(st["profiles"].get<size_t>(), files) << st.dump();
    EXPECT_EQ(st["vms_attached"].get<long>(), 3) << st.dump();
    EXPECT_EQ(st["vms_detached"].get<long>(), 3) << st.dump();
    EXPECT_EQ(st["vms_followed"].get<long>(), 0) << st.dump();
}

// Two VMs of one build under one agent: the second compiles no table and adds no row to the
// kernel (its module entries point at the first's rows, native/unwind_store.hpp), and both get
// their native frames right: zlib's C code under the Erlang loop that called it.
TEST_F(AgentTest, TwoVmsOfOneBuildShareUnwindRowsAndBothUnwindNativeFrames) {
    TempDir tmp;
    const fs::path out = tmp.path / "profiles", stats = tmp.path / "stats.json";
    ErlVm a(debian_vm(), "bb_native:main(zlib)", {"-sname", "bbshare_a"});
    a.wait_line("ready", 60s);
    // clang-format off
    RunningTool agent = start_tool("beam-bpf-agent", {"--every", "2", "-F", "499", "--output", out.string(),
                                                      "--retention", "0", "--match", "bbshare_[abc]", "--stats",
                                                      stats.string()});
    // clang-format on
    std::string err;
    ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(a.os_pid()) + ",", 30s, &err)) << err;
    // The stats file is rewritten every second: one written after `since`.
    auto stats_after = [&](std::chrono::steady_clock::time_point since) {
        std::this_thread::sleep_for(
            std::chrono::duration_cast<std::chrono::milliseconds>(since + 1500ms - std::chrono::steady_clock::now()));
        return nlohmann::json::parse(slurp(stats));
    };
    const nlohmann::json one = stats_after(std::chrono::steady_clock::now());
    const nlohmann::json& store1 = one["unwind_store"];
    ASSERT_GT(store1["rows_used"].get<long>(), 0) << one.dump();

    ErlVm b(debian_vm(), "bb_native:main(zlib)", {"-sname", "bbshare_b"});
    b.wait_line("ready", 60s);
    ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(b.os_pid()) + ",", 30s, &err)) << err;
    const nlohmann::json two = stats_after(std::chrono::steady_clock::now());
    const nlohmann::json& store2 = two["unwind_store"];
    std::map<std::string, long> rows_of;  // by os_pid
    for (const auto& v : two["vms"]) rows_of[std::to_string(v["os_pid"].get<long>())] = v["unwind_rows"].get<long>();
    const long rows_a = rows_of[std::to_string(a.os_pid())], rows_b = rows_of[std::to_string(b.os_pid())];
    std::cerr << "agent test: one VM " << store1.dump() << "\nagent test: two VMs " << store2.dump() << "; rows of A "
              << rows_a << ", of B " << rows_b << "\n";
    EXPECT_GT(rows_b, 0) << two.dump();
    EXPECT_EQ(rows_a, rows_b) << "the same build maps the same files";
    EXPECT_EQ(store2["rows_used"], store1["rows_used"]) << "B added rows";
    EXPECT_EQ(store2["buckets_used"], store1["buckets_used"]);
    EXPECT_EQ(store2["tables_compiled"], store1["tables_compiled"]) << "B compiled a table";
    EXPECT_GT(store2["tables_reused"].get<long>(), store1["tables_reused"].get<long>());
    EXPECT_EQ(store2["kernel_bytes"], store1["kernel_bytes"]);
    EXPECT_EQ(store2["refused"].get<long>(), 0);

    std::this_thread::sleep_for(4s);  // two intervals of both
    // A goes: its entries are released, the rows stay (B points at them). B goes: nothing is
    // held. C, of the same build, after: compiled and placed again, in as many rows as before.
    const pid_t a_pid = a.os_pid(), b_pid = b.os_pid();
    auto gone = [&](ErlVm& vm, pid_t pid) {
        vm.kill_now();
        EXPECT_TRUE(wait_stderr(agent, "detached pid " + std::to_string(pid), 10s, &err)) << err;
        return stats_after(std::chrono::steady_clock::now())["unwind_store"];
    };
    const nlohmann::json without_a = gone(a, a_pid);
    EXPECT_EQ(without_a["rows_used"], store1["rows_used"]) << without_a.dump();
    EXPECT_EQ(without_a["module_entries"], store1["module_entries"]) << without_a.dump();
    const nlohmann::json none = gone(b, b_pid);
    EXPECT_EQ(none["rows_used"].get<long>(), 0) << none.dump();
    EXPECT_EQ(none["regions"].get<long>(), 0) << none.dump();
    ErlVm c(debian_vm(), "bb_native:main(zlib)", {"-sname", "bbshare_c"});
    c.wait_line("ready", 60s);
    ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(c.os_pid()) + ",", 30s, &err)) << err;
    const nlohmann::json again = stats_after(std::chrono::steady_clock::now())["unwind_store"];
    std::cerr << "agent test: A and B gone " << none.dump() << "\nagent test: then C " << again.dump() << "\n";
    EXPECT_EQ(again["rows_used"], store1["rows_used"]) << again.dump();
    EXPECT_EQ(again["tables_compiled"].get<long>(), 2 * store1["tables_compiled"].get<long>()) << again.dump();
    kill(agent.pid, SIGTERM);
    ToolResult r = finish_tool(agent, false, 30s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(r.err.find("no room for its"), std::string::npos) << r.err;

    // Each VM's samples in libz (a leaf libz names, or its FDE's start), and of those the ones
    // whose stack goes on through beam.smp to the Erlang loop that called zlib.
    struct Native {
        long in_libz = 0, chained = 0;
    };
    std::map<std::string, Native> by_pid;
    for (const auto& e : fs::recursive_directory_iterator(out)) {
        if (!e.path().string().ends_with(".pb.gz")) continue;
        for (const Trace& t : decode(e.path())) {
            const std::string& leaf = t.frames.front();
            if (leaf.find("libz.so") == std::string::npos && !leaf.starts_with("deflate") &&
                !leaf.starts_with("adler32") && !leaf.starts_with("crc32") && !leaf.starts_with("inflate") &&
                !leaf.starts_with("_tr_") && !leaf.starts_with("compress"))
                continue;
            // Whose: the file's directory, SERVICE-PID (no pid in the labels).
            const std::string dir = e.path().parent_path().filename().string();
            Native& n = by_pid[dir.substr(dir.rfind('-') + 1)];
            n.in_libz += t.count;
            if (has_frame(t, "bb_native:zip_loop/3")) n.chained += t.count;
        }
    }
    for (const pid_t pid : {a_pid, b_pid}) {
        const Native& n = by_pid[std::to_string(pid)];
        std::cerr << "agent test: pid " << pid << ": " << n.chained << " of " << n.in_libz
                  << " libz samples under bb_native:zip_loop/3\n";
        EXPECT_GT(n.in_libz, 100) << "pid " << pid;
        EXPECT_GE(n.chained, n.in_libz * 95 / 100) << "pid " << pid;
    }
}

// protoc --decode's text format as a tree: each message's fields in order, scalars as text
// (strings unquoted), submessages as trees.
struct TextMsg {
    struct Field {
        std::string name, value;
        std::shared_ptr<TextMsg> msg;
    };
    std::vector<Field> fields;

    std::vector<const TextMsg*> all(const std::string& name) const {
        std::vector<const TextMsg*> out;
        for (const Field& f : fields)
            if (f.name == name && f.msg) out.push_back(f.msg.get());
        return out;
    }
    const TextMsg& one(const std::string& name) const {
        static const TextMsg empty;
        auto a = all(name);
        return a.empty() ? empty : *a.front();
    }
    std::vector<std::string> values(const std::string& name) const {
        std::vector<std::string> out;
        for (const Field& f : fields)
            if (f.name == name && !f.msg) out.push_back(f.value);
        return out;
    }
    std::string value(const std::string& name) const {
        auto v = values(name);
        return v.empty() ? "" : v.front();
    }
    long number(const std::string& name) const {
        std::string v = value(name);
        return v.empty() ? 0 : std::stol(v);  // proto3 leaves zeros out
    }
};

// A text-format string literal's bytes: C escapes, octal for bytes that are not printable ASCII.
std::string unquote(const std::string& q) {
    std::string out;
    for (size_t i = 1; i + 1 < q.size(); i++) {
        if (q[i] != '\\') {
            out += q[i];
            continue;
        }
        char c = q[++i];
        if (c >= '0' && c <= '7') {
            int n = 0;
            for (int k = 0; k < 3 && q[i] >= '0' && q[i] <= '7'; k++) n = n * 8 + (q[i++] - '0');
            i--;
            out += static_cast<char>(n);
        } else {
            out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
        }
    }
    return out;
}

TextMsg parse_text_format(const std::string& text) {
    TextMsg root;
    std::vector<TextMsg*> open{&root};
    for (const std::string& raw : lines_of(text)) {
        std::string line = raw.substr(raw.find_first_not_of(' '));
        if (line == "}") {
            open.pop_back();
        } else if (line.ends_with(" {")) {
            auto m = std::make_shared<TextMsg>();
            open.back()->fields.push_back({line.substr(0, line.size() - 2), "", m});
            open.push_back(m.get());
        } else {
            size_t colon = line.find(": ");
            if (colon == std::string::npos) throw std::runtime_error("protoc --decode: cannot read '" + line + "'");
            std::string v = line.substr(colon + 2);
            open.back()->fields.push_back({line.substr(0, colon), v.starts_with("\"") ? unquote(v) : v, nullptr});
        }
    }
    return root;
}

// One OTLP request as the agent sends it, decoded by protoc with the messages of proto/.
TextMsg decode_otlp(const fs::path& body) {
    const std::string dir = BB_OTLP_PROTO_DIR;
    ToolResult r = run_command({"sh", "-c",
                                "exec protoc --decode=opentelemetry.proto.collector.profiles.v1development."
                                "ExportProfilesServiceRequest -I \"$1\" "
                                "\"$1\"/opentelemetry/proto/collector/profiles/v1development/profiles_service.proto < "
                                "\"$0\"",
                                body.string(), dir},
                               60s);
    if (r.exit_code != 0) throw std::runtime_error("protoc --decode " + body.string() + ": " + describe(r));
    return parse_text_format(r.out);
}

// The directory sink's file of the interval starting at `start_ns` (ProfileDir::write's name).
std::string pprof_name(uint64_t start_ns) {
    time_t t = static_cast<time_t>(start_ns / 1'000'000'000ull);
    tm utc{};
    gmtime_r(&t, &utc);
    char stamp[32], name[64];
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%S", &utc);
    snprintf(name, sizeof name, "cpu-%s.%03dZ.pb.gz", stamp, static_cast<int>((start_ns / 1'000'000) % 1000));
    return name;
}

TEST_F(AgentTest, OtlpProfilesOfTwoVmsDecodeWithTheirResourceBeamFramesAndThePprofsCounts) {
    TempDir tmp;
    const fs::path out = tmp.path / "profiles", recv = tmp.path / "otlp", port_file = tmp.path / "port",
                   stats = tmp.path / "stats.json", cfg = tmp.path / "agent.conf", auth = tmp.path / "token";
    // Two 503s saying Retry-After: 1 (retried, after 1 s: the agent's own first backoff is
    // 0.5 s), then a partial success (not to be sent again), then 200s.
    auto receiver = start_receiver("otlp_receiver.py",
                                   {"--out", recv.string(), "--proto-dir", BB_OTLP_PROTO_DIR, "--answers",
                                    "503,503,partial", "--retry-after", "1"},
                                   port_file);
    {
        std::ofstream(cfg) << "otlp-headers-file=" << (tmp.path / "headers").string() << "\nlabel.env=otlp_test\n";
        std::ofstream(tmp.path / "headers") << "X-Test: yes\n";
        std::ofstream(auth) << "Bearer t0ken\n";
    }
    // A: Debian's OTP 25 in Erlang code (split532); B: the OTP 27 build in zlib's C code,
    // called from bb_native:zip_loop/3.
    ErlVm a(debian_vm(), "bb_work:main(split532)", {"-sname", "bbotlp_a"});
    ErlVm b(otp27_vm(), "bb_native:main(zlib)", {"-sname", "bbotlp_b"});
    a.wait_line("ready", 60s);
    b.wait_line("ready", 60s);
    // No path in the URL: the agent adds OTLP/HTTP's /v1development/profiles.
    // clang-format off
    RunningTool agent = start_tool(
        "beam-bpf-agent", {"--every", "2", "-F", "499", "--output", out.string(), "--retention", "0", "--otlp",
                           "http://127.0.0.1:" + slurp(port_file), "--otlp-auth", auth.string(), "--max-backoff", "1",
                           "--match", "bbotlp_[ab]", "--stats", stats.string(), "--config", cfg.string()});
    // clang-format on
    std::string err;
    for (const ErlVm* vm : {&a, &b})
        ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(vm->os_pid()) + ",", 30s, &err)) << err;
    std::this_thread::sleep_for(5s);
    kill(agent.pid, SIGTERM);
    ToolResult r = finish_tool(agent, false, 30s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);

    struct Vm {
        std::string node, otp, leaf;  // leaf: its workload's Erlang function
        size_t bodies = 0, native = 0;
    };
    std::map<std::string, Vm> vms{{std::to_string(a.os_pid()), {sname_node("bbotlp_a"), "25", "bb_work:f5/2"}},
                                  {std::to_string(b.os_pid()), {sname_node("bbotlp_b"), "27", "bb_native:zip_loop/3"}}};
    static const std::regex mfa(R"(^\S+:\S+/\d+$)");
    std::set<std::string> files_seen;
    size_t received = 0, partial = 0;
    for (const auto& f : fs::directory_iterator(recv)) {
        if (f.path().extension() != ".json") continue;
        received++;
        nlohmann::json meta = nlohmann::json::parse(slurp(f.path()));
        EXPECT_EQ(meta["path"], "/v1development/profiles");
        EXPECT_EQ(meta["headers"].value("Content-Type", ""), "application/x-protobuf") << meta.dump();
        EXPECT_EQ(meta["headers"].value("Content-Encoding", ""), "gzip") << meta.dump();
        EXPECT_EQ(meta["headers"].value("Authorization", ""), "Bearer t0ken") << meta.dump();
        EXPECT_EQ(meta["headers"].value("X-Test", ""), "yes") << meta.dump();
        partial += meta["answer"] == "partial";
        fs::path body = f.path();
        body.replace_extension(".pb");
        const TextMsg req = decode_otlp(body);
        ASSERT_EQ(req.all("resource_profiles").size(), 1u) << body;
        const TextMsg& rp = req.one("resource_profiles");

        // The resource: whose profile this is.
        std::map<std::string, std::string> res;
        for (const TextMsg* kv : rp.one("resource").all("attributes")) {
            const TextMsg& v = kv->one("value");
            res[kv->value("key")] = v.values("int_value").empty() ? v.value("string_value") : v.value("int_value");
        }
        ASSERT_TRUE(vms.count(res["process.pid"])) << body << ": process.pid " << res["process.pid"];
        Vm& vm = vms[res["process.pid"]];
        vm.bodies++;
        EXPECT_EQ(res["beam.node"], vm.node) << body;
        EXPECT_EQ(res["service.name"], vm.node) << body;
        EXPECT_EQ(res["beam.otp_release"], vm.otp) << body;
        EXPECT_EQ(res["env"], "otlp_test") << body;
        EXPECT_EQ(res["process.runtime.name"], "BEAM") << body;
        for (const char* k : {"host.name", "process.runtime.version", "process.linux.cgroup"})
            EXPECT_FALSE(res[k].empty()) << body << " has no " << k;
        EXPECT_EQ(rp.one("scope_profiles").one("scope").value("name"), "beam-bpf");

        // The tables; element 0 of each is the empty one.
        const TextMsg& d = req.one("dictionary");
        const std::vector<std::string> str = d.values("string_table");
        auto s = [&](long i) { return i >= 0 && i < static_cast<long>(str.size()) ? str[i] : "<bad index>"; };
        const auto functions = d.all("function_table"), locations = d.all("location_table"),
                   mappings = d.all("mapping_table"), attrs = d.all("attribute_table"), stacks = d.all("stack_table");
        ASSERT_TRUE(!str.empty() && str[0].empty() && !functions.empty() && !locations.empty() && !mappings.empty() &&
                    !attrs.empty() && !stacks.empty() && d.all("link_table").size() == 1)
            << body;
        auto attribute = [&](const TextMsg& m, const std::string& key) {
            for (const std::string& i : m.values("attribute_indices")) {
                const TextMsg& kv = *attrs.at(std::stol(i));
                if (s(kv.number("key_strindex")) == key) return kv.one("value").value("string_value");
            }
            return std::string();
        };
        // Each frame: its name, and its type as profile.frame.type says.
        std::vector<std::pair<std::string, std::string>> frame(locations.size());
        for (size_t i = 1; i < locations.size(); i++) {
            const TextMsg& l = *locations[i];
            const std::string name = s(functions.at(l.one("lines").number("function_index"))->number("name_strindex"));
            const std::string mapping = s(mappings.at(l.number("mapping_index"))->number("filename_strindex"));
            frame[i] = {name, attribute(l, "profile.frame.type")};
            // Erlang functions and the JIT's own code (global::process_main, ...) are beam.
            if (std::regex_match(name, mfa) || mapping.starts_with("[JIT]")) {
                EXPECT_EQ(frame[i].second, "beam") << body << ": " << name << " in " << mapping;
            } else if (!name.starts_with("[")) {  // not one of the VM's [pseudo frames]
                EXPECT_EQ(frame[i].second, mapping == "[kernel]" ? "kernel" : "native")
                    << body << ": " << name << " in " << mapping;
                vm.native += frame[i].second == "native";
            }
        }

        // The samples, against the pprof the directory sink wrote of the same interval.
        const TextMsg& prof = rp.one("scope_profiles").one("profiles");
        EXPECT_EQ(s(prof.one("sample_type").number("type_strindex")), "cpu");
        EXPECT_EQ(s(prof.one("sample_type").number("unit_strindex")), "nanoseconds");
        const long period = prof.number("period");
        ASSERT_EQ(period, 1'000'000'000 / 499) << body;
        std::map<std::string, long> leaves;  // leaf frame -> samples
        bool leaf_seen = false;
        for (const TextMsg* smp : prof.all("samples")) {
            const long value = smp->number("values");
            EXPECT_EQ(value % period, 0) << body;
            std::vector<std::string> st = stacks.at(smp->number("stack_index"))->values("location_indices");
            ASSERT_FALSE(st.empty()) << body;
            leaves[frame.at(std::stol(st.front())).first] += value / period;
            for (const std::string& l : st) {
                if (frame.at(std::stol(l)).first != vm.leaf) continue;
                leaf_seen = true;
                EXPECT_EQ(frame.at(std::stol(l)).second, "beam") << body;
                // No process identity in the samples by default (--process-labels: docs/agent.md, Labels).
                EXPECT_TRUE(attribute(*smp, "beam.process.pid").empty()) << body;
                EXPECT_TRUE(attribute(*smp, "beam.process.name").empty()) << body;
            }
        }
        EXPECT_TRUE(leaf_seen || prof.all("samples").size() < 20) << body << " never shows " << vm.leaf;
        std::string file;
        for (const auto& d : fs::directory_iterator(out))
            if (d.path().string().ends_with("-" + res["process.pid"]))
                file = (d.path() / pprof_name(prof.number("time_unix_nano"))).string();
        ASSERT_TRUE(fs::exists(file)) << body << ": no pprof " << file << " of the same interval";
        EXPECT_TRUE(files_seen.insert(file).second) << file << " was sent twice";
        std::map<std::string, long> pprof_leaves;
        for (const Trace& t : decode(file)) pprof_leaves[t.frames.front()] += t.count;
        EXPECT_EQ(leaves, pprof_leaves) << body << " and " << file;
    }
    nlohmann::json st = nlohmann::json::parse(slurp(stats));
    std::cerr << "agent test: OTLP: " << received << " requests received (A " << vms.begin()->second.bodies << ", B "
              << std::next(vms.begin())->second.bodies << "), native frames " << vms.begin()->second.native << " / "
              << std::next(vms.begin())->second.native << " (distinct, per request), " << st["profiles"]
              << " profiles, " << st["otlp_pushes"] << " pushed, " << st["otlp_push_failures"] << " failed attempts\n";
    for (const auto& [pid, vm] : vms) EXPECT_GE(vm.bodies, 2u) << vm.node;
    EXPECT_GT(vms[std::to_string(b.os_pid())].native, 0u) << "no native frame in B's zlib profiles";
    // Every profile arrived once: the 503s retried, the partial success not.
    EXPECT_EQ(partial, 1u);
    std::vector<std::pair<double, std::string>> requests;  // time, answer
    for (const std::string& line : lines_of(slurp(recv / "requests.log"))) {
        std::istringstream in(line);
        requests.emplace_back();
        in >> requests.back().first >> requests.back().second;
    }
    ASSERT_GE(requests.size(), 3u);
    EXPECT_EQ(requests[0].second + requests[1].second + requests[2].second, "503503partial");
    // The 503's Retry-After waited, within --max-backoff 1.
    EXPECT_GE(requests[1].first - requests[0].first, 0.95) << "Retry-After: 1 not honoured";
    EXPECT_EQ(requests.size(), received + 2);
    EXPECT_EQ(received, st["profiles"].get<size_t>()) << st.dump();
    EXPECT_EQ(st["otlp_pushes"].get<size_t>(), received - 1) << st.dump();
    EXPECT_EQ(st["otlp_push_rejected"].get<long>(), 1) << st.dump();
    EXPECT_EQ(st["otlp_push_failures"].get<long>(), 3) << st.dump();
    EXPECT_EQ(st["otlp_push_dropped"].get<long>(), 0) << st.dump();
    EXPECT_NE(st["otlp_push_last_error"].get<std::string>().find("scripted partial success"), std::string::npos)
        << st.dump();
    EXPECT_EQ(st["pushes"].get<long>(), 0) << st.dump();
}

// -e cpu,alloc: beside each VM's CPU profile, an allocation profile from the watchpoints, as
// beam-bpf-sample -e alloc makes it (tests/integration/alloc_test.cpp): bb_alloc's worker
// allocates 3:1:0 words in alloc_three, alloc_one and alloc_none by construction.
TEST_F(AgentTest, AllocationProfilesBesideTheCpuOnes) {
    TempDir tmp;
    const fs::path out = tmp.path / "profiles", stats = tmp.path / "stats.json";
    ErlVm vm(debian_vm(), "bb_alloc:main()", {"-sname", "bbagent_alloc"});
    std::istringstream ready(vm.wait_line("ready", 60s));
    std::string word, worker;
    ready >> word >> worker;
    // --alloc-period 4096: about 3,200 samples from the 19,200,000 words of 1,200 rounds (epochs
    // that begin while the tracer's watch is on are not sampled: 1,381 of 500 rounds' 1,953
    // were). 800 rounds gave 2,100 to 2,200 on a quiet machine, but 1,467 and 1,531 in two local
    // CI runs, under the 1,876 asked below. Not a shorter period: see the last check.
    // clang-format off
    RunningTool agent = start_tool("beam-bpf-agent", {"-e", "cpu,alloc", "--watchpoints-in-vm", "true", "--alloc-period", "4096", "--every", "2",
                                                      "--output", out.string(), "--retention", "0", "--match",
                                                      "bbagent_alloc", "--stats", stats.string()});
    // clang-format on
    std::string err;
    ASSERT_TRUE(wait_stderr(agent, "allocation profile: ", 30s, &err)) << err;
    vm.send_line("go 1200");
    vm.wait_line("gc_words", 120s);
    // An interval ends (--every 2) and SIGTERM ends the last one; an interval of an idle VM
    // after the burst may have no sample and no file: one pair of files at least.
    std::this_thread::sleep_for(2500ms);
    kill(agent.pid, SIGTERM);
    ToolResult r = finish_tool(agent, false, 30s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);

    std::map<std::string, long> words;  // leaf function of the worker's samples -> words
    long all = 0;
    size_t alloc_files = 0, cpu_files = 0;
    for (const auto& d : fs::directory_iterator(out))
        for (const auto& f : fs::directory_iterator(d.path())) {
            const std::string name = f.path().filename().string();
            if (name.starts_with("cpu-")) cpu_files++;
            if (!name.starts_with("alloc-")) continue;
            alloc_files++;
            for (const Trace& t : decode(f.path(), "alloc_words")) {
                EXPECT_EQ(t.labels.count("node") ? t.labels.at("node") : "", sname_node("bbagent_alloc")) << f.path();
                EXPECT_FALSE(t.labels.count("pid") || t.labels.count("os_pid")) << f.path();
                EXPECT_TRUE(d.path().filename().string().ends_with("-" + std::to_string(vm.os_pid()))) << f.path();
                // The worker's samples (no pid label: it alone runs rounds/1, under each).
                if (has_frame(t, "bb_alloc:rounds/1")) {
                    words[t.frames.front()] += t.count;
                    all += t.count;
                }
            }
        }
    nlohmann::json st = nlohmann::json::parse(slurp(stats));
    ASSERT_EQ(st["vms"].size(), 0u) << st.dump();  // detached at SIGTERM
    std::cerr << "agent test: -e cpu,alloc: " << alloc_files << " allocation and " << cpu_files << " CPU profiles; "
              << all << " words of the worker: " << kThree << " " << 100.0 * words[kThree] / all << "%, " << kOne << " "
              << 100.0 * words[kOne] / all << "%, " << kNone << " " << 100.0 * words[kNone] / all << "%; "
              << st["alloc_samples"].get<long>() << " samples\n";
    EXPECT_GE(alloc_files, 1u);
    // Samples enough that 3 points is 3 standard deviations of a 75% share (the check below allows
    // 5: see there).
    EXPECT_GE(st["alloc_samples"].get<long>(), 1876) << st.dump();
    EXPECT_EQ(alloc_files, cpu_files);
    // 1,200 rounds of 16,000 words (19,200,000), sampled every 4,096 on average. Epochs that begin
    // while another process's watch is on are not sampled, and each heap's samples are scaled to
    // its exact words (profile/alloc_strata.hpp): the worker's words are the GC entries' (they fell
    // short of the truth by the sampled words alone, to half of it on a loaded machine).
    EXPECT_NEAR(static_cast<double>(all), 19'200'000.0, 19'200'000.0 * 0.01) << r.err;
    // 5 points, not the 3 that beam-bpf-sample -e alloc --process meets (alloc_test.cpp): without
    // --process the worker's trace receiver, woken by each of its collections, competes for the
    // one watch in step with it. At --alloc-period 256 every epoch of the receiver is flipped, the
    // worker's lost epochs follow its rhythm, and its split moved with the machine's load beyond
    // the sampling error (70.7% to 77.9% over 20 runs, 69.3% in a CI-like run on 2026-11-26); at
    // 4,096 the flips are coin tosses (74.7 to 75.7% measured, 73.7 and 75.0% here;
    // docs/allocation-profiling.md, Where it is still biased; the runs in docs/validation.md).
    // Lock-in, what the watchpoints replaced, gave 100% or 0%.
    EXPECT_NEAR(100.0 * words[kThree] / all, 75.0, 5.0);
    EXPECT_NEAR(100.0 * words[kOne] / all, 25.0, 5.0);
    EXPECT_LT(100.0 * words[kNone] / all, 0.5);
}

// -e cpu,wall on OTP 29: a wall profile of every process beside each CPU one, in process-seconds,
// to the directory as the others (tests/workloads/bb_wall.erl: 200 clients waiting on one
// gen_server, 100 receivers, 20 busy loops on 2 schedulers).
TEST_F(AgentTest, WallProfilesBesideTheCpuOnes) {
    TempDir tmp;
    const fs::path out = tmp.path / "profiles";
    ErlVm vm(vm_named("otp29"), "bb_wall:main()", {"-sname", "bbagent_wall", "+S", "2"});
    std::istringstream ready(vm.wait_line("ready", 60s));
    std::string word, server;
    long processes = 0;
    ready >> word >> server >> processes;
    ASSERT_GT(processes, 320) << vm.output();
    RunningTool agent = start_tool("beam-bpf-agent", {"-e", "cpu,wall", "--every", "2", "--output", out.string(),
                                                      "--retention", "0", "--match", "bbagent_wall"});
    std::string err;
    ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(vm.os_pid()) + ",", 30s, &err)) << err;
    const auto from = std::chrono::steady_clock::now();
    std::this_thread::sleep_for(5s);
    kill(agent.pid, SIGTERM);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - from).count();
    ToolResult r = finish_tool(agent, false, 30s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);

    size_t wall_files = 0, cpu_files = 0;
    double all = 0, calls = 0;
    std::map<std::string, double> states;
    const std::string the_server = "[waiting for bb_wall_server, pid " + server.substr(1, server.size() - 2) + "]";
    for (const auto& d : fs::directory_iterator(out))
        for (const auto& f : fs::directory_iterator(d.path())) {
            const std::string name = f.path().filename().string();
            if (name.starts_with("cpu-")) cpu_files++;
            if (!name.starts_with("wall-")) continue;
            wall_files++;
            for (const Trace& t : decode(f.path(), "wall")) {
                EXPECT_EQ(t.labels.count("node") ? t.labels.at("node") : "", sname_node("bbagent_wall")) << f.path();
                all += static_cast<double>(t.count);
                states[t.frames.back()] += static_cast<double>(t.count);  // the root: the state
                if (t.frames.front() == the_server) calls += static_cast<double>(t.count);
            }
        }
    std::string by_state;
    for (const auto& [s, ns] : states) by_state += " " + s + " " + std::to_string(ns / all);
    std::cerr << "agent test: -e cpu,wall: " << wall_files << " wall and " << cpu_files << " CPU profiles; "
              << all / 1e9 << " process-seconds over " << seconds << " s of " << processes << " processes;" << by_state
              << "; waiting for the server " << 100 * calls / all << "%\n";
    EXPECT_GE(wall_files, 2u);
    EXPECT_EQ(wall_files, cpu_files);
    // Every process's time, from the first tick to the last: within 10% of the processes' count
    // times the agent's run (the first tick comes a moment after the attach line).
    EXPECT_NEAR(all / 1e9 / seconds, static_cast<double>(processes), 0.1 * static_cast<double>(processes));
    // The 200 clients are 55% of the processes, waiting for the server nearly all the time
    // (WallVmTest checks the shares against the VM's own sampler).
    EXPECT_NEAR(calls / all, 200.0 / static_cast<double>(processes), 0.05) << by_state;
    for (const auto& [s, ns] : states) EXPECT_TRUE(s.starts_with("[") && s.ends_with("]")) << s;
}

// -e cpu,offcpu on OTP 29: an off-CPU profile per interval beside the CPU one, in nanoseconds
// blocked (tests/workloads/bb_offcpu.erl): a NIF that sleeps 10 ms a call, 200 calls, all inside
// the agent's run. The function that calls it carries what the NIF's own clock says it slept.
TEST_F(AgentTest, OffcpuProfilesBesideTheCpuOnes) {
    TempDir tmp;
    const fs::path out = tmp.path / "profiles";
    std::string lib = BB_SLEEP_NIF;
    lib.resize(lib.size() - 3);  // load_nif/2 adds ".so"
    ErlVm vm(vm_named("otp29"), "bb_offcpu:main(\"" + lib + "\")", {"-sname", "bbagent_offcpu", "+S", "2"});
    vm.wait_line("ready", 60s);
    RunningTool agent = start_tool("beam-bpf-agent", {"-e", "cpu,offcpu", "--every", "2", "--output", out.string(),
                                                      "--retention", "0", "--match", "bbagent_offcpu"});
    std::string err;
    ASSERT_TRUE(wait_stderr(agent, "(pid " + std::to_string(vm.os_pid()) + ",", 30s, &err)) << err;
    // The off-CPU walker is a second BPF object, loaded after the CPU one's line: its own line
    // says it is attached. (A fixed second's wait once gave sleeper/2 0.30 s short of the NIF's
    // 2.04 s in CI, the likeliest cause sleeps before that walker was attached.)
    ASSERT_TRUE(wait_stderr(agent, "offcpu: the VM's threads'", 30s, &err)) << err;
    auto slept = [&] {
        vm.send_line("slept");
        return std::stod(vm.wait_line("slept ").substr(6));
    };
    const double before = slept();
    const SchedStats rq_before = schedstat(vm.os_pid());
    const double steal0 = steal_ns();
    vm.send_line("sleeper 10 200");
    vm.wait_line("sleeper_done", 20s);
    const double run_queue = run_queue_waits(rq_before, schedstat(vm.os_pid())), steal = steal_ns() - steal0;
    const double nif = slept() - before;
    kill(agent.pid, SIGTERM);
    ToolResult r = finish_tool(agent, false, 30s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
    EXPECT_EQ(r.err.find("no off-CPU profile"), std::string::npos) << r.err;

    size_t offcpu_files = 0, cpu_files = 0;
    double all = 0, sleeper = 0, idle = 0;
    for (const auto& d : fs::directory_iterator(out))
        for (const auto& f : fs::directory_iterator(d.path())) {
            const std::string name = f.path().filename().string();
            if (name.starts_with("cpu-")) cpu_files++;
            if (!name.starts_with("offcpu-")) continue;
            offcpu_files++;
            for (const Trace& t : decode(f.path(), "offcpu")) {
                EXPECT_EQ(t.labels.count("node") ? t.labels.at("node") : "", sname_node("bbagent_offcpu")) << f.path();
                all += static_cast<double>(t.count);
                if (t.frames.back() == "[scheduler idle]") idle += static_cast<double>(t.count);
                if (std::find(t.frames.begin(), t.frames.end(), "bb_offcpu:sleeper/2") != t.frames.end())
                    sleeper += static_cast<double>(t.count);
            }
        }
    std::cerr << "agent test: -e cpu,offcpu: " << offcpu_files << " off-CPU and " << cpu_files << " CPU profiles; "
              << all / 1e9 << " s blocked, " << idle / 1e9 << " s of it schedulers idle; sleeper/2 " << sleeper / 1e9
              << " s, the NIF slept " << nif / 1e9 << " s; the VM's threads waited " << run_queue / 1e9
              << " s on a run queue, the host " << steal / 1e9 << " s of the CPUs\n";
    EXPECT_GE(offcpu_files, 2u);
    EXPECT_EQ(offcpu_files, cpu_files);
    EXPECT_GT(idle, 0.0);
    // Every call is a block of 10 ms, over the 1 ms threshold: all walked. The NIF's clock also
    // counts each wakeup's wait for a CPU, which is not time blocked: within 3%, less those
    // waits (as OffcpuVmTest.ABlockingNifIsChargedToItsCaller; a local CI run beside other
    // work once gave 2.014 s against 2.084).
    EXPECT_GT(nif, 1.9e9);
    EXPECT_LE(sleeper, nif + 0.03 * nif);
    EXPECT_GE(sleeper, nif - run_queue - steal - 0.03 * nif);  // and what the host took meanwhile
}

// A VM that exits mid-interval leaves that interval's off-CPU profile also when it has no CPU
// sample: a node whose threads all block (a hung node, what an off-CPU profile is for). At -F 1
// an idle VM's threads are almost never sampled on a CPU; before the agent's detach looked at
// the off-CPU part, such a VM's blocks were lost ("0 samples ... in 0 profiles"). (With wall
// too, the wall part's data kept the interval: -e cpu,offcpu is the case that lost it.)
TEST_F(AgentTest, AHungVmExitingMidIntervalKeepsItsLastOffcpuProfile) {
    TempDir tmp;
    const fs::path out = tmp.path / "profiles";
    std::string lib = BB_SLEEP_NIF;
    lib.resize(lib.size() - 3);  // load_nif/2 adds ".so"
    ErlVm vm(debian_vm(), "bb_offcpu:main(\"" + lib + "\")", {"-sname", "bbagent_hung", "+S", "1"});
    vm.wait_line("ready", 60s);
    RunningTool agent = start_tool("beam-bpf-agent", {"-e", "cpu,offcpu", "-F", "1", "--every", "60", "--output",
                                                      out.string(), "--retention", "0", "--match", "bbagent_hung"});
    std::string err;
    ASSERT_TRUE(wait_stderr(agent, "offcpu: the VM's threads'", 30s, &err)) << err;
    vm.send_line("sleeper 10 50");  // the scheduler blocked in the NIF for half a second
    vm.wait_line("sleeper");
    std::this_thread::sleep_for(1500ms);
    const pid_t pid = vm.os_pid();
    vm.kill_now();
    ASSERT_TRUE(wait_stderr(agent, "detached pid " + std::to_string(pid), 10s, &err)) << err;
    kill(agent.pid, SIGTERM);
    ToolResult r = finish_tool(agent, false, 30s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);

    std::map<std::string, size_t> files;  // kind -> files
    double sleeper = 0;
    for (const auto& d : fs::directory_iterator(out))
        for (const auto& f : fs::directory_iterator(d.path())) {
            const std::string name = f.path().filename().string();
            const std::string kind = name.substr(0, name.find('-'));
            files[kind]++;
            if (kind == "offcpu")
                for (const Trace& t : decode(f.path(), "offcpu"))
                    if (std::find(t.frames.begin(), t.frames.end(), "bb_offcpu:sleeper/2") != t.frames.end())
                        sleeper += static_cast<double>(t.count);
        }
    std::cerr << "agent test: a VM exiting mid-interval: " << files["cpu"] << " CPU, " << files["offcpu"]
              << " off-CPU profiles; sleeper/2 blocked " << sleeper / 1e9 << " s\n";
    EXPECT_EQ(files["offcpu"], 1u) << r.err;
    EXPECT_GT(sleeper, 0.4e9) << "50 calls of 10 ms";
}

}  // namespace agent_test
}  // namespace bbt
