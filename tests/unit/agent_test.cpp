// beam-bpf-agent's parts that need no VM: what a command line and a cgroup path say of a VM,
// Pyroscope's application name, the profile directory's retention, the push queue's bound.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include "agent/agent.hpp"
#include "agent/config.hpp"
#include "target/discovery.hpp"
#include "target/node_name.hpp"
#include "agent/matcher.hpp"
#include "agent/metrics.hpp"
#include "agent/push_protocol.hpp"
#include "agent/profile_dir.hpp"
#include "agent/sinks.hpp"
#include "base/error.hpp"
#include "temp_dir.hpp"

namespace bb::agent {
namespace {

// Node and service names are the target's say: a label value can neither end its quotes nor its
// line, nor carry a control byte to whoever reads the text.
TEST(PrometheusLabel, EscapesWhatTheTextFormatSaysAndNoControlByteGoesThrough) {
    EXPECT_EQ(prometheus_label("rabbit@host"), "rabbit@host");
    EXPECT_EQ(prometheus_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    EXPECT_EQ(prometheus_label(std::string("x\x1b[2Jy\0z\x7f", 9)), "x?[2Jy?z?");
}

TEST(AgentDiscovery, BeamExecutables) {
    EXPECT_TRUE(is_beam_exe("/usr/lib/erlang/erts-13.1.5/bin/beam.smp"));
    EXPECT_TRUE(is_beam_exe("/opt/otp/erts-15.2.7/bin/beam.lcnt.smp"));
    EXPECT_TRUE(is_beam_exe("/app/erts-15/bin/beam.smp (deleted)"));
    EXPECT_FALSE(is_beam_exe("/usr/lib/erlang/erts-13.1.5/bin/erlexec"));
    EXPECT_FALSE(is_beam_exe("/usr/bin/beam.smpx"));
    EXPECT_FALSE(is_beam_exe(""));
}

TEST(AgentDiscovery, NodeName) {
    EXPECT_EQ(node_name({"beam.smp", "--", "-root", "/usr/lib/erlang", "--", "-sname", "worker", "-noshell"}),
              "worker");
    EXPECT_EQ(node_name({"beam.smp", "--", "-name", "a@10.0.0.1"}), "a@10.0.0.1");
    EXPECT_EQ(node_name({"beam.smp", "--", "-noshell"}), "");
    EXPECT_EQ(node_name({"beam.smp", "-sname"}), "");  // no value: garbage, not a crash
}

// erts_this_node_sysname_BUFFER as erts_set_this_node leaves it: "%T" of the node's atom.
TEST(AgentDiscovery, NodeNameFromTheVmsBuffer) {
    auto buffer = [](std::string text) { return text.append(kNodeNameBuffer - text.size(), '\0'); };
    EXPECT_EQ(parse_node_name(buffer("shop@vm")), "shop@vm");
    EXPECT_EQ(parse_node_name(buffer("'rabbit@host.example'")), "rabbit@host.example");
    EXPECT_EQ(parse_node_name(buffer("'a\\'b@h'")), "a'b@h");
    EXPECT_EQ(parse_node_name(buffer("nonode@nohost")), "");  // not distributed
    // Garbage is no name: no NUL in the buffer, no '@', two, a control byte, an open quote.
    EXPECT_EQ(parse_node_name(std::string(kNodeNameBuffer, 'a')), std::nullopt);
    EXPECT_EQ(parse_node_name(buffer("uninitialized yet")), std::nullopt);
    EXPECT_EQ(parse_node_name(buffer("a@b@c")), std::nullopt);
    EXPECT_EQ(parse_node_name(buffer("a@\x1b[2J")), std::nullopt);
    EXPECT_EQ(parse_node_name(buffer("'a@b")), std::nullopt);
    EXPECT_EQ(parse_node_name(buffer("@b")), std::nullopt);
    EXPECT_EQ(parse_node_name(""), std::nullopt);
}

// The VM's own name first; the command line's only while the VM has none (or cannot be read).
TEST(AgentDiscovery, NodeLabelIsTheVmsOwnName) {
    BeamProcess p;
    p.argv = {"beam.smp", "--", "-sname", "rabbit"};
    p.node_in_memory = "rabbit@host";
    EXPECT_EQ(labels_of(p).node, "rabbit@host");
    EXPECT_FALSE(labels_of(p).node_from_command_line);
    p.node_in_memory = "";
    EXPECT_EQ(labels_of(p).node, "rabbit");
    EXPECT_TRUE(labels_of(p).node_from_command_line);
    p.node_in_memory.reset();
    EXPECT_EQ(labels_of(p).node, "rabbit");
    p.argv = {"beam.smp"};  // RabbitMQ: no -sname, distribution started at run time
    p.node_in_memory = "trial@localhost";
    EXPECT_EQ(labels_of(p).node, "trial@localhost");
    p.node_in_memory = "";
    EXPECT_EQ(labels_of(p).node, "");
    EXPECT_FALSE(labels_of(p).node_from_command_line);
}

TEST(AgentDiscovery, NodeNamesAsAUserTypesThem) {
    EXPECT_TRUE(node_matches("shop@vm", "shop@vm"));
    EXPECT_TRUE(node_matches("shop@vm", "'shop@vm'"));
    EXPECT_TRUE(node_matches("shop@vm", "shop"));
    EXPECT_TRUE(node_matches("shop", "shop@vm"));  // -sname shop, not distributed yet
    EXPECT_FALSE(node_matches("shop@vm", "shop@other"));
    EXPECT_FALSE(node_matches("shop@vm", "sho"));
    EXPECT_FALSE(node_matches("trialej@localhost", "trial@localhost"));
    EXPECT_FALSE(node_matches("", "shop"));
}

TEST(AgentDiscovery, ReleaseName) {
    // mix release: RELEASE_NAME; relx: REL_NAME; else the directory above releases/ in -boot.
    EXPECT_EQ(release_name({"beam.smp"}, {"RELEASE_NAME=my_app"}), "my_app");
    EXPECT_EQ(release_name({"beam.smp"}, {"REL_NAME=rabbit"}), "rabbit");
    EXPECT_EQ(release_name({"beam.smp", "--", "-root", "/opt/shop/erts", "-boot", "/opt/shop/releases/1.2.0/start"},
                           {}),
              "shop");
    // OTP's own boot scripts are no release.
    EXPECT_EQ(release_name({"beam.smp", "--", "-root", "/usr/lib/erlang", "-boot",
                            "/usr/lib/erlang/releases/25/start_clean"},
                           {}),
              "");
    EXPECT_EQ(release_name({"beam.smp", "--", "-boot", "start_clean"}, {}), "");
    EXPECT_EQ(release_name({"beam.smp", "--", "-boot", "/releases/x"}, {}), "");
    EXPECT_EQ(release_name({"beam.smp", "--", "-boot"}, {}), "");
}

TEST(AgentDiscovery, ContainerId) {
    const std::string id(64, 'a');
    EXPECT_EQ(container_id("/system.slice/docker-" + id + ".scope"), id);
    EXPECT_EQ(container_id("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-" +
                           id + ".scope"),
              id);
    EXPECT_EQ(container_id("/docker/" + id), id);
    EXPECT_EQ(container_id("/user.slice/user-0.slice/session-3.scope"), "");
    EXPECT_EQ(container_id("/docker/" + id + "a"), "");  // 65 hex digits: not an id
}

TEST(AgentDiscovery, CleanRemovesControlBytes) {
    EXPECT_EQ(clean("a\x1b[31mb\n"), "a?[31mb?");
    EXPECT_EQ(clean(std::string(300, 'x')).size(), 256u);
}

TEST(AgentDiscovery, ReadsThisProcessAsNotABeam) {
    EXPECT_FALSE(read_beam("/proc", getpid()));
    EXPECT_FALSE(read_beam("/proc", 0));
}

TEST(AgentDiscovery, PodUidFromTheKubeletsCgroupPaths) {
    const std::string uid = "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d", id(64, 'a');
    // The systemd cgroup driver: the uid's dashes as underscores, in each QoS class's form.
    EXPECT_EQ(pod_uid("/kubepods.slice/kubepods-burstable.slice/"
                      "kubepods-burstable-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/cri-containerd-" +
                      id + ".scope"),
              uid);
    EXPECT_EQ(pod_uid("/kubepods.slice/kubepods-pod1a2b3c4d_5e6f_7a8b_9c0d_1e2f3a4b5c6d.slice/crio-" + id + ".scope"),
              uid);
    // cgroupfs: with dashes, the container's directory below.
    EXPECT_EQ(pod_uid("/kubepods/besteffort/pod" + uid + "/" + id), uid);
    EXPECT_EQ(pod_uid("/kubepods/pod" + uid + "/" + id), uid);
    EXPECT_EQ(pod_uid("/kubepods/pod" + uid), uid);
    // Not a pod's.
    EXPECT_EQ(pod_uid("/system.slice/pod" + uid + ".service"), "");  // no kubepods
    EXPECT_EQ(pod_uid("/kubepods/burstable/pod1a2b3c4d-5e6f"), "");  // no whole uid
    EXPECT_EQ(pod_uid("/kubepods/burstable/xpod" + uid), "");
    EXPECT_EQ(pod_uid("/kubepods/burstable/pod" + uid + "x"), "");
    EXPECT_EQ(pod_uid("/kubepods/burstable/pod1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6g"), "");  // g
    EXPECT_EQ(pod_uid(""), "");
}

TEST(AgentDiscovery, ParsedTextsKeepOnlyWhatNamesTheVm) {
    // As /proc has them: each string ended by a NUL.
    auto nul_ended = [](std::initializer_list<std::string> items) {
        std::string out;
        for (const std::string& i : items) out += i + '\0';
        return out;
    };
    ProcTexts t;
    t.exe = "/usr/lib/erlang/erts-13.1.5/bin/beam.smp";
    t.stat = "42 (beam.smp) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 30 0 123456 0 0";
    t.cmdline = nul_ended({"beam.smp", "--", "-sname", "rabbit"});
    t.environ = nul_ended(
        {"PATH=/bin", "SECRET_KEY=hunter2", "POD_NAME=shop-7d9c-x", "POD_NAMESPACE=prod", "RELEASE_NAME=shop"});
    t.cgroup = "1:name=systemd:/old\n0::/kubepods/pod1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d/" + std::string(64, 'c') +
               "\n";
    t.status = "Name:\tbeam.smp\nNSpid:\t42\t1\n";
    auto p = parse_beam(42, t);
    ASSERT_TRUE(p);
    EXPECT_EQ(p->start_time, 123456u);
    EXPECT_EQ(p->argv, (std::vector<std::string>{"beam.smp", "--", "-sname", "rabbit"}));
    EXPECT_EQ(p->env, (std::vector<std::string>{"POD_NAME=shop-7d9c-x", "POD_NAMESPACE=prod", "RELEASE_NAME=shop"}));
    EXPECT_EQ(p->ns_pid, 1);
    const VmLabels l = labels_of(*p);
    EXPECT_EQ(l.node, "rabbit");
    EXPECT_EQ(l.release, "shop");
    EXPECT_EQ(l.pod_name, "shop-7d9c-x");
    EXPECT_EQ(l.pod_namespace, "prod");
    EXPECT_EQ(l.pod_uid, "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d");
    EXPECT_EQ(l.container_id, std::string(64, 'c'));
    t.exe = "/usr/bin/sleep";
    EXPECT_FALSE(parse_beam(42, t));
    t.exe = "/usr/lib/erlang/erts-13.1.5/bin/beam.smp";
    t.stat = "42 (beam.smp) S";  // cut short: no start time, no VM
    EXPECT_FALSE(parse_beam(42, t));
}

TEST(AgentMatcher, SearchesCommandLineNodeAndCgroup) {
    BeamProcess p;
    p.argv = {"/usr/lib/erlang/erts-13.1.5/bin/beam.smp", "--", "-sname", "rabbit"};
    VmLabels l;
    l.node = "rabbit@host1";
    l.cgroup = "/kubepods/burstable/pod1/abc";
    EXPECT_TRUE(Matcher({}).wanted(p, l));                   // no pattern: every VM
    EXPECT_TRUE(Matcher({"rabbit@"}).wanted(p, l));          // the node name
    EXPECT_TRUE(Matcher({"/kubepods"}).wanted(p, l));        // the cgroup path
    EXPECT_TRUE(Matcher({"-sname rabbit$"}).wanted(p, l));   // the command line, joined by spaces
    EXPECT_TRUE(Matcher({"nope", "erts-13"}).wanted(p, l));  // any of them
    EXPECT_FALSE(Matcher({"bbx@.*"}).wanted(p, l));
    EXPECT_FALSE(Matcher({"^rabbit$"}).wanted(p, l));
    // Only the first 4 KiB of the command line count.
    p.argv = {"beam.smp", std::string(kMatchedCmdline, 'x'), "-sname", "late"};
    l = {};
    EXPECT_FALSE(Matcher({"late"}).wanted(p, l));
    EXPECT_EQ(joined_cmdline(p.argv).size(), kMatchedCmdline);
    EXPECT_EQ(joined_cmdline({"a", "b"}), "a b");
}

TEST(AgentMatcher, InvalidPatternsAreErrors) {
    EXPECT_EQ(Matcher::error("rabbit@"), "");
    EXPECT_EQ(Matcher::error("bbx@.*"), "");
    EXPECT_NE(Matcher::error("(unclosed"), "");
    EXPECT_NE(Matcher::error("a{2,1}"), "");
    EXPECT_NE(Matcher::error("(a)\\1"), "");  // backreferences: RE2 has none, on purpose
    EXPECT_THROW(Matcher({"ok", "[z-a]"}), UserError);
}

// The crash of issue 32: std::regex recursed once per character of a 40 KB command line. RE2
// is linear in the text, patterns that backtrack without end elsewhere included.
TEST(AgentMatcher, HugeCommandLinesAndPathologicalPatternsTakeLinearTime) {
    BeamProcess p;
    p.argv = {"/x/z", std::string(64 * 1024, 'a'), std::string(64 * 1024, 'x')};
    VmLabels l;
    l.cgroup = std::string(1024, 'a');
    const std::vector<std::string> patterns{"(a*)*b",  "(a|aa)*c",  "(x+x+)+y", "^(a|a?)+b$",
                                            "rabbit@", "/kubepods", "bbx@.*"};
    const Matcher m(patterns);
    const std::string all_a(64 * 1024, 'a'), all_x(64 * 1024, 'x');
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 10; i++) {
        EXPECT_FALSE(m.wanted(p, l));
        EXPECT_FALSE(m.found({all_a, all_x}));  // the whole 64 KiB, uncapped
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(s, 2.0) << "10 rounds of 7 patterns over 2 x 64 KiB texts took " << s << " s";
    // Linear: 8 times the text is at most ~8 times the time (16 with slack for the timer).
    const std::string big(512 * 1024, 'a');
    auto timed = [&](const std::string& text) {
        const auto a = std::chrono::steady_clock::now();
        for (int i = 0; i < 5; i++) EXPECT_FALSE(m.found({text}));
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
    };
    const double small_s = timed(all_a), big_s = timed(big);
    EXPECT_LT(big_s, 16 * small_s + 0.05) << small_s << " s for 64 KiB, " << big_s << " s for 512 KiB";
}

TEST(AgentLabels, ServiceNameFromConfigurationThenTheTarget) {
    AgentConfig cfg;
    VmLabels l;
    l.node = "rabbit@h";
    l.release = "rabbitmq";
    std::string source;
    EXPECT_EQ(service_name(cfg, l, &source), "rabbitmq");
    EXPECT_EQ(source, "release name");
    l.release.clear();
    EXPECT_EQ(service_name(cfg, l, &source), "rabbit@h");
    EXPECT_EQ(source, "node name");
    cfg.service = "queue";
    EXPECT_EQ(service_name(cfg, l, &source), "queue");
    EXPECT_EQ(source, "");
    cfg.service_by_node["rabbit@h"] = "queue-h";
    EXPECT_EQ(service_name(cfg, l, &source), "queue-h");
    EXPECT_EQ(source, "");
    // target_names=false: what the target says of itself is no service name.
    cfg = {};
    cfg.target_names = false;
    l.release = "rabbitmq";
    EXPECT_EQ(service_name(cfg, l, &source), "beam.smp");
    EXPECT_EQ(source, "");
    cfg.service_by_node["rabbit@h"] = "queue-h";
    EXPECT_EQ(service_name(cfg, l, &source), "queue-h");
    // service.NODE= by the short name, or quoted as Erlang prints it.
    cfg = {};
    cfg.service_by_node["rabbit"] = "by-short";
    EXPECT_EQ(service_name(cfg, l, &source), "by-short");
    cfg.service_by_node = {{"'rabbit@h'", "quoted"}};
    EXPECT_EQ(service_name(cfg, l, &source), "quoted");
    cfg.service_by_node = {{"rabbit@other", "other"}};
    EXPECT_EQ(service_name(cfg, l, &source), "rabbitmq");
    cfg = {};
    EXPECT_EQ(service_name(cfg, VmLabels{}, &source), "beam.smp");
    EXPECT_EQ(source, "");
}

// Pyroscope makes a series of each distinct label set: what changes at a restart (pids, container,
// cgroup path, pod name and uid) stays out of them, and goes to the OTLP resource.
TEST(AgentLabels, SeriesLabelsAreTheSameAcrossRestarts) {
    auto run = [](pid_t pid, const std::string& container, const std::string& pod, const std::string& uid) {
        VmLabels l;
        l.node = "rabbit@rabbitmq-0";
        l.release = "rabbit";
        l.container_id = container;
        l.cgroup = "/kubepods/pod" + uid + "/" + container;
        l.pod_uid = uid;
        l.pod_name = pod;
        l.pod_namespace = "queues";
        return label_sets(l, "rabbit", "release name", "host1", pid, 1, 26, "14.2", {{"env", "prod"}});
    };
    const VmLabelSets a = run(100, std::string(64, 'a'), "rabbitmq-7d9c-aaaaa", "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d");
    const VmLabelSets b = run(200, std::string(64, 'b'), "rabbitmq-7d9c-bbbbb", "9a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d");
    EXPECT_EQ(a.series, b.series);
    EXPECT_EQ(pyroscope_name("rabbit", a.series),
              "rabbit{service_name=rabbit,service_source=target,host=host1,node=rabbit@rabbitmq-0,release=rabbit,otp_"
              "release=26,"
              "erts_version=14.2,k8s_namespace=queues,env=prod}");
    std::map<std::string, std::string> res(a.resource.begin(), a.resource.end());
    EXPECT_EQ(res["os_pid"], "100");
    EXPECT_EQ(res["ns_pid"], "1");
    EXPECT_EQ(res["container_id"], std::string(64, 'a'));
    EXPECT_EQ(res["k8s.pod.name"], "rabbitmq-7d9c-aaaaa");
    EXPECT_EQ(res["k8s.pod.uid"], "1a2b3c4d-5e6f-7a8b-9c0d-1e2f3a4b5c6d");
    EXPECT_EQ(res["k8s.namespace.name"], "queues");
    EXPECT_EQ(res["node"], "rabbit@rabbitmq-0");
    // As the OTLP resource: the semantic conventions' names.
    std::set<std::string> keys;
    for (const OtlpAttribute& attr : otlp_resource(a.resource)) keys.insert(attr.first);
    for (const char* k : {"process.pid", "process.vpid", "container.id", "process.linux.cgroup", "k8s.pod.uid",
                          "k8s.pod.name", "k8s.namespace.name", "service.name", "beam.node"})
        EXPECT_TRUE(keys.count(k)) << k;
}

TEST(AgentLabels, RegisteredProcessLabelsAreCapped) {
    // 10,000 processes: 1,000 registered under 1,000 names (every tenth), most samples first.
    std::unordered_map<uint64_t, uint64_t> samples;
    for (uint64_t pid = 1; pid <= 10'000; pid++)
        if (pid % 10 == 0) samples[pid] = pid;  // pid 10,000 has the most
    auto name = [](uint64_t pid) { return pid % 10 == 0 ? "reg_" + std::to_string(pid) : std::string(); };
    const auto labels = registered_labels(samples, name, 50);
    std::set<std::string> values;
    for (const auto& [pid, v] : labels) values.insert(v);
    EXPECT_EQ(values.size(), 50u);
    EXPECT_TRUE(values.count("reg_10000"));
    EXPECT_TRUE(values.count("reg_9510"));   // the 50th most sampled
    EXPECT_FALSE(values.count("reg_9500"));  // the 51st: "other"
    // Two processes under one name (one after the other) are one value; unnamed ones are "other".
    samples = {{1, 5}, {2, 5}, {3, 100}};
    auto same = [](uint64_t pid) { return pid == 3 ? std::string() : std::string("server"); };
    const auto two = registered_labels(samples, same, 1);
    EXPECT_EQ(two.size(), 2u);
    EXPECT_EQ(two.at(1), "server");
    EXPECT_FALSE(two.count(3));
    EXPECT_TRUE(registered_labels(samples, same, 0).empty());
}

TEST(AgentSinks, PyroscopeName) {
    EXPECT_EQ(pyroscope_name("shop", {{"host", "h1"}, {"node", "a@b"}, {"empty", ""}}), "shop{host=h1,node=a@b}");
    // The characters that delimit the name cannot come from a label.
    EXPECT_EQ(pyroscope_name("s{x}", {{"cgroup", "/a,b=c}"}, {"bad key", "v"}}), "s_x_{cgroup=/a_b_c_,bad_key=v}");
}

TEST(AgentSinks, DirectoryKeepsTheNewestFiles) {
    char tmpl[] = "/tmp/bb-agent-unit-XXXXXX";
    ASSERT_TRUE(mkdtemp(tmpl));
    const std::filesystem::path dir = tmpl;
    ProfileDir d(dir.string(), Retention{3});
    FinishedProfile p;
    p.dir_name = "svc-1";
    for (int i = 0; i < 5; i++) {
        p.start_unix_ns = (1'700'000'000ull + i) * 1'000'000'000ull;
        p.pprof_gz = "profile " + std::to_string(i);
        d.write(p);
    }
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(dir / "svc-1")) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    ASSERT_EQ(names.size(), 3u);  // no temporary left, the two oldest gone
    EXPECT_EQ(names.front(), "cpu-20231114T221322.000Z.pb.gz");
    std::ifstream f(dir / "svc-1" / names.back());
    std::string content((std::istreambuf_iterator<char>(f)), {});
    EXPECT_EQ(content, "profile 4");
    std::filesystem::remove_all(dir);
}

// The agent writes a profile to a temporary made with O_EXCL and renames it over its name
// (write_file_atomically): symlinks planted at that name and at the "NAME.tmp" the agent used
// to write through are not followed; the files they point at are untouched.
TEST(AgentSinks, PlantedSymlinksAreNotFollowed) {
    char tmpl[] = "/tmp/bb-agent-unit-XXXXXX";
    ASSERT_TRUE(mkdtemp(tmpl));
    const std::filesystem::path dir = tmpl, vm_dir = dir / "svc-1", secret = dir / "host-file";
    std::filesystem::create_directories(vm_dir);
    std::ofstream(secret) << "host secret";
    FinishedProfile p;
    p.dir_name = "svc-1";
    p.start_unix_ns = 1'700'000'000ull * 1'000'000'000ull;
    p.pprof_gz = "the profile";
    const std::filesystem::path name = vm_dir / "cpu-20231114T221320.000Z.pb.gz";
    std::filesystem::create_symlink(secret, name);
    std::filesystem::create_symlink(secret, name.string() + ".tmp");
    ProfileDir d(dir.string(), Retention{0});
    EXPECT_EQ(d.write(p), name.string());
    EXPECT_FALSE(std::filesystem::is_symlink(name));
    EXPECT_TRUE(std::filesystem::is_regular_file(name));
    auto slurp = [](const std::filesystem::path& f) {
        std::ifstream in(f);
        return std::string((std::istreambuf_iterator<char>(in)), {});
    };
    EXPECT_EQ(slurp(name), "the profile");
    EXPECT_EQ(slurp(secret), "host secret");
    EXPECT_TRUE(std::filesystem::is_symlink(name.string() + ".tmp"));  // left alone, not written through
    std::filesystem::remove_all(dir);
}

TEST(AgentSinks, PushQueueDropsTheOldestAndCountsFailures) {
    // A port nobody listens on: every push fails at once (connection refused).
    int s = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    ASSERT_EQ(getsockname(s, reinterpret_cast<sockaddr*>(&a), &len), 0);
    close(s);  // bound then closed: refused
    PushConfig cfg;
    cfg.url = "http://127.0.0.1:" + std::to_string(ntohs(a.sin_port));
    cfg.queue_bytes = 250;  // two 100-byte profiles, plus the one being sent
    cfg.max_backoff = std::chrono::milliseconds(50);
    Pusher p(pyroscope_protocol(), cfg);
    FinishedProfile f;
    f.service = "svc";
    f.pprof_gz = std::string(100, 'x');
    for (int i = 0; i < 10; i++) p.enqueue(f);
    for (int i = 0; i < 100 && p.counters().failures < 2; i++)
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    PushCounters c = p.counters();
    EXPECT_GE(c.failures, 2u);
    EXPECT_EQ(c.pushed, 0u);
    EXPECT_LE(c.queue_bytes, 250u);
    EXPECT_EQ(c.dropped + c.queue_profiles, 10u);  // none lost without being counted
}

TEST(AgentSinks, OtlpUrlRetriesAndResource) {
    auto otlp = otlp_protocol();
    // No path: OTLP/HTTP's default one; a path: the URL as given.
    EXPECT_EQ(otlp->url("http://c:4318", {}), "http://c:4318/v1development/profiles");
    EXPECT_EQ(otlp->url("https://c:4318/", {}), "https://c:4318/v1development/profiles");
    EXPECT_EQ(otlp->url("http://c/otlp/v1development/profiles", {}), "http://c/otlp/v1development/profiles");
    // The specification's retryable codes only: a 500 or a 400 is not sent again.
    for (long status : {429, 502, 503, 504}) EXPECT_TRUE(otlp->retryable(status)) << status;
    for (long status : {400, 401, 404, 413, 500}) EXPECT_FALSE(otlp->retryable(status)) << status;
    EXPECT_EQ(otlp->refused(""), "");  // an empty response: full success

    const std::vector<OtlpAttribute> res = otlp_resource(
        {{"service_name", "shop"}, {"os_pid", "1234"}, {"ns_pid", ""}, {"node", "a@h"}, {"env", "prod"}});
    const std::vector<OtlpAttribute> want{{"process.runtime.name", std::string("BEAM")},
                                          {"service.name", std::string("shop")},
                                          {"process.pid", int64_t{1234}},
                                          {"beam.node", std::string("a@h")},
                                          {"env", std::string("prod")}};
    EXPECT_EQ(res, want);
}

TEST(AgentConfig, FileAndErrors) {
    char tmpl[] = "/tmp/bb-agent-conf-XXXXXX";
    int fd = mkstemp(tmpl);
    ASSERT_GE(fd, 0);
    close(fd);
    {
        std::ofstream f(tmpl);
        f << "# comment\n\nevery = 30\nservice.a@h=shop\nlabel.env=prod\nmatch=rabbit\npush=http://p:4040\n";
    }
    AgentConfig c;
    load_config_file(tmpl, c);
    EXPECT_EQ(c.every, 30);
    EXPECT_EQ(c.service_by_node.at("a@h"), "shop");
    EXPECT_EQ(c.labels.at(0), (std::pair<std::string, std::string>{"env", "prod"}));
    EXPECT_EQ(c.match.at(0), "rabbit");
    EXPECT_EQ(c.push.url, "http://p:4040");
    check(c);
    {
        std::ofstream f(tmpl);
        f << "every=30\nfrobnicate=1\n";
    }
    try {
        load_config_file(tmpl, c);
        ADD_FAILURE() << "an unknown key was taken";
    } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find(":2: unknown setting frobnicate"), std::string::npos) << e.what();
    }
    // OTLP: its own URL, auth and headers; the queue bound and backoff apply to both stores.
    set_option(c, "otlp", "http://collector:4318");
    EXPECT_THROW(set_option(c, "otlp-header", "X-Api-Key: k"), UserError);  // headers come from files
    set_option(c, "otlp-headers-file", "/etc/beam-bpf/otlp.headers");
    set_option(c, "push-tenant", "t1");
    set_option(c, "queue-bytes", "2000000");
    EXPECT_EQ(c.otlp.headers_file, "/etc/beam-bpf/otlp.headers");
    EXPECT_EQ(c.push.headers, std::vector<std::string>{"X-Scope-OrgID: t1"});
    EXPECT_EQ(c.otlp.queue_bytes, 2000000u);
    EXPECT_EQ(c.push.queue_bytes, 2000000u);
    check(c);
    c.otlp.headers = {"X-Api-Key: k"};
    check(c);
    c.otlp.headers = {"X-Api-Key: k\r\nX-Other: injected"};
    EXPECT_THROW(check(c), UserError);
    c.otlp.headers = {"no colon"};
    EXPECT_THROW(check(c), UserError);
    c.otlp.headers = {};
    c.otlp.url = "collector:4318";
    EXPECT_THROW(check(c), UserError);
    c.otlp.url = "";
    c.match = {"("};
    EXPECT_THROW(check(c), UserError);
    c.match = {};
    c.every = 0.5;
    EXPECT_THROW(check(c), UserError);
    unlink(tmpl);
}

// Every setting of the table is an option and a key of the file, and both set it alike.
TEST(AgentConfig, EverySettingFromTheCommandLineAndTheFile) {
    // A value each setting takes. A setting added to the table without one fails here.
    const std::map<std::string, std::string> values{{"every", "30"},
                                                    {"frequency", "49"},
                                                    {"events", "cpu,alloc"},
                                                    {"alloc-period", "4096"},
                                                    {"native-depth", "8"},
                                                    {"unwind-rows", "131072"},
                                                    {"output", "/tmp/bb-profiles"},
                                                    {"output-group", "adm"},
                                                    {"retention", "5"},
                                                    {"retention-bytes", "2000000"},
                                                    {"retention-age", "600"},
                                                    {"push", "http://p:4040"},
                                                    {"push-auth", "/etc/p.auth"},
                                                    {"push-tenant", "t1"},
                                                    {"push-headers-file", "/etc/p.headers"},
                                                    {"otlp", "http://c:4318"},
                                                    {"otlp-auth", "/etc/o.auth"},
                                                    {"otlp-headers-file", "/etc/o.headers"},
                                                    {"otlp-header", "X-Api-Key: k"},
                                                    {"ca-file", "/etc/ca.pem"},
                                                    {"client-cert", "/etc/c.pem"},
                                                    {"client-key", "/etc/c.key"},
                                                    {"queue-bytes", "1000"},
                                                    {"max-backoff", "5"},
                                                    {"push-tries", "3"},
                                                    {"push-max-age", "60"},
                                                    {"match", "rabbit"},
                                                    {"stats", "/tmp/bb-stats.json"},
                                                    {"metrics", "0"},
                                                    {"host", "h1"},
                                                    {"service", "shop"},
                                                    {"target-names", "false"},
                                                    {"watchpoints-in-vm", "true"},
                                                    {"process-labels", "registered"},
                                                    {"process-label-cap", "7"}};
    std::vector<std::string> args{"beam-bpf-agent"};
    std::string file;
    std::set<std::string> keys;
    for (const Setting& s : settings()) {
        SCOPED_TRACE(s.key);
        EXPECT_TRUE(keys.insert(s.key).second) << "twice in the table";
        EXPECT_EQ(find_setting(s.key), &s);
        ASSERT_TRUE(values.count(s.key)) << "no value for it in this test";
        // The long option is the key.
        const std::string names = std::string(",") + s.names + ",";
        EXPECT_NE(names.find(fmt::format(",--{},", s.key)), std::string::npos) << s.names;
        const std::string& v = values.at(s.key);
        if (std::string(s.key) == "otlp-header") {
            // Refused alike, with the way to do it.
            AgentConfig c;
            try {
                set_option(c, s.key, v);
                ADD_FAILURE() << "taken";
            } catch (const UserError& e) {
                EXPECT_NE(std::string(e.what()).find("otlp-headers-file"), std::string::npos) << e.what();
            }
            continue;
        }
        args.push_back(fmt::format("--{}", s.key));
        args.push_back(v);
        file += fmt::format("{}={}\n", s.key, v);
    }
    EXPECT_EQ(values.size(), settings().size()) << "values for settings not in the table";

    // The command line: each option records its key and value, in order.
    CLI::App app;
    GivenOptions given;
    add_setting_options(app, given);
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    app.parse(static_cast<int>(argv.size()), argv.data());
    ASSERT_EQ(given.size(), (args.size() - 1) / 2);
    for (size_t i = 0; i < given.size(); i++) {
        EXPECT_EQ("--" + given[i].first, args[1 + 2 * i]);
        EXPECT_EQ(given[i].second, args[2 + 2 * i]);
    }
    AgentConfig from_cli;
    for (const auto& [k, v] : given) set_option(from_cli, k, v);

    bbt::TempDir dir;
    const std::string path = (dir.path / "agent.conf").string();
    std::ofstream(path) << file;
    AgentConfig from_file;
    load_config_file(path, from_file);

    EXPECT_EQ(from_cli.given, from_file.given);
    EXPECT_EQ(from_cli.given.size(), settings().size() - 1);  // all but otlp-header
    EXPECT_EQ(describe(from_cli), describe(from_file));
    EXPECT_NE(describe(from_cli), describe(AgentConfig{}));
    EXPECT_EQ(from_cli.match, std::vector<std::string>{"rabbit"});
    EXPECT_EQ(from_cli.every, 30);
    EXPECT_EQ(from_cli.process_label_cap, 7u);
    EXPECT_EQ(from_cli.otlp.queue_bytes, 1000u);
}

// A reload keeps what the running agent was made with, and names what differed, grouped.
TEST(AgentConfig, ReloadKeepsWhatNeedsARestart) {
    AgentConfig running;
    AgentConfig next;
    next.native_depth = 8;
    next.alloc_period = 4096;
    next.output_group = "adm";
    next.retention = 5;  // a reload applies it
    EXPECT_EQ(keep_running(running, next),
              (std::vector<std::string>{"native-depth", "events, watchpoints-in-vm, alloc-period",
                                        "output, output-group"}));
    EXPECT_EQ(next.native_depth, running.native_depth);
    EXPECT_EQ(next.alloc_period, running.alloc_period);
    EXPECT_EQ(next.output_group, running.output_group);
    EXPECT_EQ(next.retention, 5u);
    EXPECT_TRUE(keep_running(running, next).empty());
    next.metrics_port = 9100;
    next.every = 10;
    EXPECT_EQ(keep_running(running, next), (std::vector<std::string>{"every", "metrics"}));
}

// -e: cpu always, alloc, wall and offcpu beside it in any order, each once; a reload keeps them.
TEST(AgentConfig, Events) {
    const Setting* events = find_setting("events");
    ASSERT_NE(events, nullptr);
    for (const auto& [v, alloc, wall] :
         std::vector<std::tuple<std::string, bool, bool>>{{"cpu", false, false},
                                                          {"cpu,alloc", true, false},
                                                          {"alloc,cpu", true, false},
                                                          {"cpu,wall", false, true},
                                                          {"wall,cpu", false, true},
                                                          {"cpu,alloc,wall", true, true}}) {
        AgentConfig c;
        events->set(c, "events", v);
        EXPECT_EQ(c.has_event("alloc"), alloc) << v;
        EXPECT_EQ(c.has_event("wall"), wall) << v;
        EXPECT_FALSE(c.has_event("offcpu")) << v;
    }
    for (const std::string v : {"cpu,offcpu", "offcpu,cpu,wall,alloc"}) {
        AgentConfig c;
        events->set(c, "events", v);
        EXPECT_TRUE(c.has_event("offcpu")) << v;
        EXPECT_EQ(c.has_event("wall"), c.has_event("alloc")) << v;
    }
    {  // in the list's order, whatever the setting's: what describe() and the logs say
        AgentConfig c;
        events->set(c, "events", "offcpu,cpu,wall,alloc");
        EXPECT_EQ(c.events, (std::vector<std::string>{"alloc", "wall", "offcpu"}));
        EXPECT_FALSE(c.has_event("cpu"));
    }
    for (const std::string v : {"wall", "alloc", "offcpu", "", "cpu,", "cpu,cpu", "cpu,wall,wall", "cpu,offcpu,offcpu",
                                "cpu,off-cpu", "CPU"}) {
        AgentConfig c;
        EXPECT_THROW(events->set(c, "events", v), UserError) << v;
    }
    AgentConfig running, next;
    next.events = {"wall"};
    EXPECT_EQ(keep_running(running, next), (std::vector<std::string>{"events, watchpoints-in-vm, alloc-period"}));
    EXPECT_FALSE(next.has_event("wall"));
    AgentConfig with_offcpu;
    with_offcpu.events = {"offcpu"};
    EXPECT_EQ(keep_running(running, with_offcpu),
              (std::vector<std::string>{"events, watchpoints-in-vm, alloc-period"}));
    EXPECT_FALSE(with_offcpu.has_event("offcpu"));
}

}  // namespace
}  // namespace bb::agent
