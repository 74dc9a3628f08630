// Where the agent's profiles go, besides its directory (profile_dir.hpp): Grafana Pyroscope's
// ingest API and an OTLP/HTTP receiver of the profiles signal.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "report/otlp.hpp"

namespace bb::agent {

// One finished interval of one VM, as both sinks take it.
struct FinishedProfile {
    std::string kind = "cpu";  // its -e word (profile/kinds.hpp): its file names and Pyroscope's sample type
    std::string dir_name;      // the VM's subdirectory: "<service>-<os pid>", cleaned
    std::string service;       // Pyroscope's application name
    std::vector<std::pair<std::string, std::string>> labels;  // host, os_pid, node, ...
    uint64_t start_unix_ns = 0, end_unix_ns = 0;
    uint64_t frequency_hz = 0;
    std::string pprof_gz;  // the gzipped profile.proto
    std::string otlp;      // the OTLP export request (report/otlp.hpp), gzipped, when --otlp is on
};

// Label keys and values as Pyroscope's application name takes them: keys of [A-Za-z0-9_],
// values without the characters that delimit the name ({ } , = ") or control bytes.
std::string pyroscope_name(const std::string& service, const std::vector<std::pair<std::string, std::string>>& labels);

struct PushConfig {
    std::string url;                   // Pyroscope's base URL ("http://pyroscope:4040"; /ingest is added), or OTLP's
    std::string auth_file;             // "user:password" (basic) or "Bearer TOKEN"; "" for none
    std::vector<std::string> headers;  // "Name: value" on every request (--push-tenant: X-Scope-OrgID)
    // Headers that may hold secrets: a file of "Name: value" lines, read at each request.
    std::string headers_file;
    std::string ca_file;                  // PEM CAs to verify the store with ("": the system's)
    std::string client_cert, client_key;  // PEM, for mutual TLS ("": none)
    // A profile is given up (counted and logged) after this many failed tries or this age.
    unsigned max_tries = 10;
    std::chrono::seconds max_age{3600};
    size_t queue_bytes = 64 << 20;  // profiles waiting to be pushed, at most this many bytes
    std::chrono::milliseconds max_backoff{30'000};
    std::chrono::milliseconds timeout{10'000};  // one request, connection included
};

struct PushCounters {
    uint64_t pushed = 0;    // accepted (2xx)
    uint64_t failures = 0;  // attempts that failed (each retry counts)
    uint64_t dropped = 0;   // profiles lost: pushed out of a full queue (oldest first)
    uint64_t rejected = 0;  // profiles the store refused with a 4xx other than 429: not retried
    uint64_t given_up = 0;  // profiles dropped after max_tries failed tries or at max_age
    uint64_t queue_bytes = 0, queue_profiles = 0;
    std::string last_error;
};

// One queued request: the URL's query ("" for none) and the body.
struct PushItem {
    std::string query;
    std::string body;
    std::string kind;  // FinishedProfile::kind
};

// How one kind of store takes a profile (agent/push_protocol.hpp): Pyroscope's, OTLP's.
class PushProtocol;
// POST /ingest?name=SERVICE{labels}&from=&until=&format=pprof&sampleRate=F&spyName=beam-bpf, the
// body multipart/form-data with the profile in the field "profile" (Pyroscope's documented
// form for pprof with a sample type configuration).
std::unique_ptr<PushProtocol> pyroscope_protocol();
// POST URL (http://collector:4318/v1development/profiles; a URL without a path gets that one)
// with the ExportProfilesServiceRequest as application/x-protobuf, gzip-encoded (OTLP/HTTP).
std::unique_ptr<PushProtocol> otlp_protocol();
// A profile's labels as its OTLP resource: under the semantic conventions' names where there is
// one (service.name, host.name, process.pid, process.vpid, container.id, process.linux.cgroup,
// process.runtime.version: the erts version), beam.* for the node, release and OTP release,
// label.KEY settings as KEY.
std::vector<OtlpAttribute> otlp_resource(const std::vector<std::pair<std::string, std::string>>& labels);

// Sends each profile to one store. One thread sends; enqueue() never waits for the network. A
// failure the protocol calls worth retrying (no connection; a 5xx or 429 for Pyroscope; a 401 or
// 403 a few times, for a rotated credential) is tried again after a backoff of its own that
// doubles up to max_backoff, or the store's Retry-After if longer (still at most max_backoff);
// meanwhile the profiles behind it are sent, so one profile the store chokes on blocks no other.
// When requests fail one after the other the store as a whole is left alone, on the same
// backoff. A profile is given up after max_tries failed tries or at max_age; the queue is
// bounded in bytes and drops its oldest profile first. Failures are said on stderr: at the
// first, at each change of cause, at most once a minute while they last, and when pushes work
// again; never a credential.
class Pusher {
public:
    Pusher(std::unique_ptr<PushProtocol> protocol, PushConfig cfg);
    // Aborts a request in flight (within about a second: libcurl's progress callback).
    ~Pusher();
    Pusher(const Pusher&) = delete;
    Pusher& operator=(const Pusher&) = delete;

    void enqueue(const FinishedProfile& p);
    // Waits until the queue is empty or `deadline` passed (SIGTERM's last push); returns by the
    // deadline even while a request hangs.
    void flush(std::chrono::milliseconds deadline);
    // SIGHUP: a new URL, credentials or bound (the queue is trimmed to it). Never waits for the
    // network: the request in flight goes on with the old settings.
    void reconfigure(PushConfig cfg);
    PushCounters counters() const;

private:
    using Item = PushItem;
    using Clock = std::chrono::steady_clock;
    // A queued profile and its own tries.
    struct Queued {
        std::shared_ptr<const Item> item;
        uint64_t seq = 0;  // arrival order: the oldest ready one is sent first, dropped first
        unsigned tries = 0;
        Clock::time_point enqueued, next_try;
    };
    // What one request came to.
    struct Sent {
        enum { delivered, refused, failed } result = failed;
        std::string cause;   // a failure's kind ("HTTP 500", "connection refused"): a new one is said at once
        std::string detail;  // what it was, for the lines and last_error; never a credential
        bool auth = false;   // 401 or 403: given up after a few tries
        // The store answered with a status: the failure may be this profile's, and counts
        // towards its tries. One with no answer (no connection, a timeout, a local file) is the
        // store's or the agent's: the profile waits, bounded by max_age and the queue's bytes.
        bool answered = false;
        std::chrono::milliseconds wait{0};  // the store's Retry-After, 0 if it gave none
    };
    void run();
    Sent send(const Item& it, const PushConfig& cfg);
    void trim_locked();
    void done_locked(const Queued& q);  // it leaves the queue's byte count
    void give_up_locked(const Queued& q, const std::string& why);
    void failed_locked(const Sent& s);
    void succeeded_locked();
    void say(const std::string& line) const;

    std::unique_ptr<PushProtocol> protocol_;
    mutable std::mutex mu_;
    std::condition_variable cv_;
    PushConfig cfg_;
    std::deque<Queued> queue_;
    uint64_t next_seq_ = 0;
    std::shared_ptr<const Item> inflight_;  // taken off the queue while it is being sent
    PushCounters c_;
    // The store as a whole: failed requests in a row, and when it is tried again.
    unsigned failed_in_row_ = 0;
    Clock::time_point store_ready_{};
    // The failure lines: the cause last said, when, and what happened since.
    struct {
        bool failing = false, said = false;  // the last request failed; a line said so
        std::string cause;
        Clock::time_point at{};
        uint64_t unsaid = 0;  // failures since the last line
        uint64_t given_up_unsaid = 0;
        Clock::time_point given_up_at{};
    } lines_;
    bool stop_ = false;
    std::atomic<bool> abort_{false};  // read by libcurl's progress callback: ends a request in flight
    void* curl_ = nullptr;            // CURL*, used by the sending thread only
    std::thread thread_;
};

}  // namespace bb::agent
