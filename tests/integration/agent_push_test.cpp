// beam-bpf-agent's pushes against stores that misbehave (tests/agent/faulty_store.py, a real
// HTTP server in its own process): refused credentials, one profile the store always fails, a
// store that never answers, an answer cut off after its 2xx, TLS with a private CA and mutual
// TLS. The Pusher runs in this process (no VM, no BPF needed); its stderr lines are read back.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "agent/push_protocol.hpp"
#include "agent/sinks.hpp"
#include "agent_fixtures.hpp"
#include "harness.hpp"

namespace bbt {
namespace agent_push_test {

using bb::agent::FinishedProfile;
using bb::agent::PushConfig;
using bb::agent::Pusher;
using Clock = std::chrono::steady_clock;

// This process's stderr, into a file while it lives: the Pusher's lines.
class StderrCapture {
public:
    explicit StderrCapture(const fs::path& file) : file_(file) {
        fflush(stderr);
        saved_ = dup(2);
        int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        dup2(fd, 2);
        close(fd);
    }
    ~StderrCapture() {
        fflush(stderr);
        dup2(saved_, 2);
        close(saved_);
    }
    std::string text() const {
        fflush(stderr);
        return slurp(file_);
    }

private:
    fs::path file_;
    int saved_ = -1;
};

// faulty_store.py on a free loopback port, once it listens.
struct Store {
    std::unique_ptr<ChildProcess> proc;
    std::string url;
    fs::path log;

    Store(const fs::path& dir, std::vector<std::string> args, const std::string& scheme = "http") {
        log = dir / "requests.jsonl";
        const fs::path port_file = dir / "port";
        fs::remove(port_file);
        fs::remove(log);
        args.insert(args.begin(), {"python3", std::string(BB_SOURCE_DIR) + "/tests/agent/faulty_store.py", "--log",
                                   log.string(), "--port-file", port_file.string()});
        proc = std::make_unique<ChildProcess>(args);
        for (int i = 0; i < 200 && !fs::exists(port_file); i++) std::this_thread::sleep_for(50ms);
        if (!fs::exists(port_file)) throw std::runtime_error("faulty_store.py did not start");
        url = scheme + "://127.0.0.1:" + slurp(port_file);
    }
    // The requests it got, in order.
    std::vector<nlohmann::json> requests() const {
        std::vector<nlohmann::json> out;
        for (const std::string& line : lines_of(slurp(log))) out.push_back(nlohmann::json::parse(line));
        return out;
    }
};

FinishedProfile profile(const std::string& service) {
    FinishedProfile f;
    f.service = service;
    f.labels = {{"host", "h"}};
    f.start_unix_ns = 1'700'000'000'000'000'000ull;
    f.end_unix_ns = f.start_unix_ns + 10'000'000'000ull;
    f.frequency_hz = 99;
    f.pprof_gz = "\x1f\x8b profile of " + service;
    f.otlp = "otlp of " + service;
    return f;
}

// Fast retries: the tests see many tries in little time.
PushConfig quick(const std::string& url) {
    PushConfig cfg;
    cfg.url = url;
    cfg.max_backoff = 100ms;
    cfg.timeout = 3s;
    return cfg;
}

template <class F>
bool eventually(F done, std::chrono::milliseconds within = 5s) {
    for (auto end = Clock::now() + within; Clock::now() < end; std::this_thread::sleep_for(20ms))
        if (done()) return true;
    return done();
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Every line the Pusher wrote is one of its own: the prefix and the store's option.
void expect_lines_of(const std::string& err, const std::string& option) {
    for (const std::string& line : lines_of(err))
        EXPECT_TRUE(line.starts_with("beam-bpf-agent: " + option + ": ")) << line;
}

class PushTest : public ::testing::Test {
protected:
    TempDir tmp;
};

TEST_F(PushTest, RefusedCredentialsAreSaidWithoutThemAndGivenUpAfterThreeTries) {
    Store store(tmp.path, {"--status", "401"});
    const fs::path auth = tmp.path / "auth", headers = tmp.path / "headers";
    std::ofstream(auth) << "pushuser:s3cret-pass\n";
    std::ofstream(headers) << "# the store's key\nX-Api-Key: k3y-value\n";
    PushConfig cfg = quick(store.url);
    cfg.auth_file = auth;
    cfg.headers_file = headers;
    std::string text;
    {
        StderrCapture err(tmp.path / "stderr");
        Pusher p(bb::agent::pyroscope_protocol(), cfg);
        p.enqueue(profile("a"));
        p.enqueue(profile("b"));
        ASSERT_TRUE(eventually([&] { return p.counters().given_up == 2; })) << err.text();
        const auto c = p.counters();
        EXPECT_EQ(c.failures, 6u);
        EXPECT_EQ(c.pushed + c.rejected + c.dropped + c.queue_profiles, 0u);
        text = err.text();
    }
    // Three tries each, with the credentials and the header of the files.
    const auto got = store.requests();
    ASSERT_EQ(got.size(), 6u);
    for (const auto& r : got) {
        EXPECT_TRUE(r["authorization"].get<std::string>().starts_with("Basic ")) << r.dump();
        EXPECT_EQ(r["x_api_key"], "k3y-value") << r.dump();
    }
    std::cerr << text;
    expect_lines_of(text, "--push");
    EXPECT_NE(text.find("--push: pushing to " + store.url + " fails: HTTP 401: the store refused the credentials of " +
                        auth.string() + "\n"),
              std::string::npos);
    EXPECT_NE(text.find("gave up a cpu profile after 3 tries"), std::string::npos);
    for (const std::string& secret :
         std::vector<std::string>{"s3cret", "k3y-value", got[0]["authorization"].get<std::string>().substr(6)})
        EXPECT_EQ(text.find(secret), std::string::npos) << secret;
    EXPECT_LE(lines_of(text).size(), 3u) << "one line for the failure, one for the give-ups";

    // A header line with a control byte is refused before any request, naming its line only.
    std::ofstream(headers) << "X-Api-Key: k3y\x01value\n";
    {
        StderrCapture err(tmp.path / "stderr2");
        Pusher p(bb::agent::pyroscope_protocol(), cfg);
        p.enqueue(profile("a"));
        ASSERT_TRUE(eventually([&] { return p.counters().failures > 0; }));
        text = err.text();
    }
    EXPECT_EQ(store.requests().size(), 6u);
    EXPECT_NE(text.find("fails: line 1 of " + headers.string() + " holds a control byte\n"), std::string::npos) << text;
    EXPECT_EQ(text.find("k3y"), std::string::npos) << text;
}

TEST_F(PushTest, OneProfileTheStoreFailsBlocksNoOther) {
    Store store(tmp.path, {"--fail-name", "poison=500"});
    PushConfig cfg = quick(store.url);
    cfg.max_tries = 4;
    cfg.max_backoff = 500ms;  // the poisoned profile's own waits: 0.5 s each
    std::string text;
    double delivered = 0;
    {
        StderrCapture err(tmp.path / "stderr");
        const auto start = Clock::now();
        Pusher p(bb::agent::pyroscope_protocol(), cfg);
        p.enqueue(profile("poison"));
        for (int i = 0; i < 5; i++) p.enqueue(profile("good" + std::to_string(i)));
        // The good ones go while the poisoned one waits for its next try.
        ASSERT_TRUE(eventually([&] { return p.counters().pushed == 5; }, 2s)) << err.text();
        delivered = seconds_since(start);
        ASSERT_TRUE(eventually([&] { return p.counters().given_up == 1; }));
        p.enqueue(profile("good5"));
        ASSERT_TRUE(eventually([&] { return p.counters().pushed == 6; }));
        EXPECT_EQ(p.counters().failures, 4u);
        text = err.text();
    }
    std::cerr << "push test: 5 profiles behind a failing one delivered in " << delivered << " s\n" << text;
    EXPECT_LT(delivered, 0.5) << "they waited for the failing one's backoff";
    size_t poisoned = 0;
    std::map<std::string, int> good;
    for (const auto& r : store.requests()) {
        const std::string name = r["name"];
        if (name.starts_with("poison")) poisoned++;
        else good[name]++;
    }
    EXPECT_EQ(poisoned, 4u);
    EXPECT_EQ(good.size(), 6u);
    for (const auto& [name, n] : good) EXPECT_EQ(n, 1) << name;
    expect_lines_of(text, "--push");
    EXPECT_NE(text.find("fails: HTTP 500\n"), std::string::npos);
    EXPECT_NE(text.find("works again"), std::string::npos);
    EXPECT_NE(text.find("gave up a cpu profile after 4 tries"), std::string::npos);
}

TEST_F(PushTest, StoreThatNeverAnswersHoldsUpNeitherFlushNorReloadNorStop) {
    Store store(tmp.path, {"--hang"});
    PushConfig cfg = quick(store.url);
    cfg.timeout = 60s;  // longer than the test: only the abort ends the request
    auto p = std::make_unique<Pusher>(bb::agent::otlp_protocol(), cfg);
    p->enqueue(profile("a"));
    ASSERT_TRUE(eventually([&] { return store.requests().size() == 1; }));
    auto t = Clock::now();
    p->reconfigure(cfg);  // SIGHUP in the agent's main loop
    const double reload = seconds_since(t);
    t = Clock::now();
    p->flush(1000ms);
    const double flush = seconds_since(t);
    EXPECT_EQ(p->counters().queue_profiles, 1u);
    t = Clock::now();
    p.reset();
    const double stop = seconds_since(t);
    std::cerr << "push test: with a request hanging, reload took " << reload << " s, flush(1 s) " << flush
              << " s, the destructor " << stop << " s\n";
    EXPECT_LT(reload, 0.1);
    EXPECT_LT(flush, 1.2);
    // The agent exits within 5 s of SIGTERM, its flush and stop included.
    EXPECT_LT(flush + stop, 5.0);
}

TEST_F(PushTest, TwoXxCutOffMidAnswerIsDeliveredOnce) {
    Store store(tmp.path, {"--reset-after-answer"});
    std::string text;
    {
        StderrCapture err(tmp.path / "stderr");
        Pusher p(bb::agent::pyroscope_protocol(), quick(store.url));
        for (int i = 0; i < 3; i++) p.enqueue(profile("p" + std::to_string(i)));
        const bool pushed = eventually([&] { return p.counters().pushed == 3; });
        std::this_thread::sleep_for(300ms);  // time for a wrong try again
        EXPECT_TRUE(pushed);
        EXPECT_EQ(p.counters().failures, 0u);
        text = err.text();
    }
    EXPECT_EQ(store.requests().size(), 3u);
    EXPECT_EQ(text, "");
}

// A CA, a server certificate for 127.0.0.1 and a client certificate, made by openssl in `dir`.
void make_certificates(const fs::path& dir) {
    const std::string script = R"(set -e
cd ")" + dir.string() + R"("
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
key ca.key
openssl req -x509 -new -key ca.key -out ca.pem -days 2 -subj /CN=push-test-ca
for who in server client; do
  key $who.key
  openssl req -new -key $who.key -out $who.csr -subj /CN=$who
done
printf 'subjectAltName=IP:127.0.0.1\n' > server.ext
printf 'extendedKeyUsage=clientAuth\n' > client.ext
for who in server client; do
  openssl x509 -req -in $who.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile $who.ext -out $who.pem 2>/dev/null
done
)";
    ToolResult r = run_command({"sh", "-c", script}, 30s);
    ASSERT_EQ(r.exit_code, 0) << describe(r);
}

// Pushes one profile with `cfg`; true if the store took it.
bool pushes(const PushConfig& cfg, std::string* err_lines, const fs::path& stderr_file) {
    StderrCapture err(stderr_file);
    Pusher p(bb::agent::pyroscope_protocol(), cfg);
    p.enqueue(profile("tls"));
    eventually([&] { return p.counters().pushed + p.counters().failures > 0; });
    *err_lines = err.text();
    return p.counters().pushed == 1;
}

TEST_F(PushTest, TlsWithAPrivateCa) {
    ASSERT_NO_FATAL_FAILURE(make_certificates(tmp.path));
    const fs::path d = tmp.path;
    Store store(d, {"--cert", (d / "server.pem").string(), "--key", (d / "server.key").string()}, "https");
    PushConfig cfg = quick(store.url);
    std::string err;
    EXPECT_FALSE(pushes(cfg, &err, d / "stderr")) << "the system's CAs do not know this one";
    EXPECT_NE(err.find("--push: pushing to " + store.url + " fails: "), std::string::npos) << err;
    std::cerr << err;
    cfg.ca_file = d / "ca.pem";
    EXPECT_TRUE(pushes(cfg, &err, d / "stderr")) << err;
    // Without --push-ca-file, SSL_CERT_FILE as OpenSSL's own tools read it.
    cfg.ca_file.clear();
    setenv("SSL_CERT_FILE", (d / "ca.pem").c_str(), 1);
    const bool by_env = pushes(cfg, &err, d / "stderr");
    unsetenv("SSL_CERT_FILE");
    EXPECT_TRUE(by_env) << err;
    EXPECT_EQ(store.requests().size(), 2u);
}

TEST_F(PushTest, MutualTlsNeedsTheClientCertificate) {
    ASSERT_NO_FATAL_FAILURE(make_certificates(tmp.path));
    const fs::path d = tmp.path;
    Store store(d,
                {"--cert", (d / "server.pem").string(), "--key", (d / "server.key").string(), "--client-ca",
                 (d / "ca.pem").string()},
                "https");
    PushConfig cfg = quick(store.url);
    cfg.ca_file = d / "ca.pem";
    std::string err;
    EXPECT_FALSE(pushes(cfg, &err, d / "stderr")) << "no client certificate";
    EXPECT_NE(err.find("--push: pushing to " + store.url + " fails: "), std::string::npos) << err;
    std::cerr << err;
    cfg.client_cert = d / "client.pem";
    cfg.client_key = d / "client.key";
    EXPECT_TRUE(pushes(cfg, &err, d / "stderr")) << err;
    EXPECT_EQ(store.requests().size(), 1u);
}

}  // namespace agent_push_test
}  // namespace bbt
