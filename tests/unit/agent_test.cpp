// beam-bpf-agent's parts that need no VM: what a command line and a cgroup path say of a VM,
// Pyroscope's application name, the profile directory's retention, the push queue's bound.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "agent/config.hpp"
#include "agent/discovery.hpp"
#include "agent/push_protocol.hpp"
#include "agent/profile_dir.hpp"
#include "agent/sinks.hpp"
#include "base/error.hpp"

namespace bb::agent {
namespace {

TEST(AgentDiscovery, BeamExecutables) {
    EXPECT_TRUE(is_beam_exe("/usr/lib/erlang/erts-13.1.5/bin/beam.smp"));
    EXPECT_TRUE(is_beam_exe("/opt/otp/erts-15.2.7/bin/beam.lcnt.smp"));
    EXPECT_TRUE(is_beam_exe("/app/erts-15/bin/beam.smp (deleted)"));
    EXPECT_FALSE(is_beam_exe("/usr/lib/erlang/erts-13.1.5/bin/erlexec"));
    EXPECT_FALSE(is_beam_exe("/usr/bin/beam.smpx"));
    EXPECT_FALSE(is_beam_exe(""));
}

TEST(AgentDiscovery, NodeName) {
    EXPECT_EQ(node_name({"beam.smp", "--", "-root", "/usr/lib/erlang", "--", "-sname", "worker", "-noshell"}), "worker");
    EXPECT_EQ(node_name({"beam.smp", "--", "-name", "a@10.0.0.1"}), "a@10.0.0.1");
    EXPECT_EQ(node_name({"beam.smp", "--", "-noshell"}), "");
    EXPECT_EQ(node_name({"beam.smp", "-sname"}), "");  // no value: garbage, not a crash
}

TEST(AgentDiscovery, ReleaseName) {
    // mix release: RELEASE_NAME; relx: REL_NAME; else the directory above releases/ in -boot.
    EXPECT_EQ(release_name({"beam.smp"}, {"RELEASE_NAME=my_app"}), "my_app");
    EXPECT_EQ(release_name({"beam.smp"}, {"REL_NAME=rabbit"}), "rabbit");
    EXPECT_EQ(release_name({"beam.smp", "--", "-root", "/opt/shop/erts", "-boot", "/opt/shop/releases/1.2.0/start"}, {}),
              "shop");
    // OTP's own boot scripts are no release.
    EXPECT_EQ(release_name({"beam.smp", "--", "-root", "/usr/lib/erlang", "-boot", "/usr/lib/erlang/releases/25/start_clean"}, {}),
              "");
    EXPECT_EQ(release_name({"beam.smp", "--", "-boot", "start_clean"}, {}), "");
    EXPECT_EQ(release_name({"beam.smp", "--", "-boot", "/releases/x"}, {}), "");
    EXPECT_EQ(release_name({"beam.smp", "--", "-boot"}, {}), "");
}

TEST(AgentDiscovery, ContainerId) {
    const std::string id(64, 'a');
    EXPECT_EQ(container_id("/system.slice/docker-" + id + ".scope"), id);
    EXPECT_EQ(container_id("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234.slice/cri-containerd-" + id + ".scope"), id);
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
    for (int i = 0; i < 100 && p.counters().failures < 2; i++) std::this_thread::sleep_for(std::chrono::milliseconds(20));
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

    const std::vector<OtlpAttribute> res =
        otlp_resource({{"service_name", "shop"}, {"os_pid", "1234"}, {"ns_pid", ""}, {"node", "a@h"}, {"env", "prod"}});
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

}  // namespace
}  // namespace bb::agent
