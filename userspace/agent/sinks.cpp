#include "agent/sinks.hpp"

#include "agent/push_protocol.hpp"
#include "run/output.hpp"

#include <curl/curl.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.hpp"

namespace bb::agent {

namespace fs = std::filesystem;

std::string pyroscope_name(const std::string& service, const std::vector<std::pair<std::string, std::string>>& labels) {
    auto value = [](std::string v) {
        for (char& c : v)
            if (std::strchr("{},=\"", c) || static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f)
                c = '_';
        return v;
    };
    std::string out = value(service) + "{";
    bool first = true;
    for (const auto& [k, v] : labels) {
        if (v.empty()) continue;
        std::string key = k;
        for (char& c : key)
            if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') c = '_';
        out += (first ? "" : ",") + key + "=" + value(v);
        first = false;
    }
    return out + "}";
}

namespace {

// curl_easy_escape ignores its handle since curl 7.82 (Debian 12 has 7.88).
std::string url_escape(CURL* curl, const std::string& s) {
    char* e = curl_easy_escape(curl, s.c_str(), static_cast<int>(s.size()));
    std::string out = e ? e : "";
    curl_free(e);
    return out;
}

// What Pyroscope should make of the profile's sample types (report/pprof.cpp): the CPU time, or
// the bytes allocated (alloc_space, as Go's heap profiles), summed, sampled.
constexpr const char* kCpuSampleTypeConfig =
    R"({"cpu":{"units":"samples","aggregation":"sum","display-name":"cpu","sampled":true}})";
constexpr const char* kAllocSampleTypeConfig =
    R"({"alloc_space":{"units":"bytes","aggregation":"sum","display-name":"alloc_space","sampled":true}})";

std::string trimmed(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    size_t b = 0;
    while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) b++;
    return s.substr(b);
}

// The answer's first bytes: enough for a store's reason, never its whole body in memory.
size_t keep_start(char* data, size_t size, size_t n, void* out) {
    auto* s = static_cast<std::string*>(out);
    s->append(data, std::min(size * n, 4096 - std::min<size_t>(s->size(), 4096)));
    return size * n;
}

class Pyroscope : public PushProtocol {
public:
    const char* option() const override { return "--push"; }
    PushItem item(const FinishedProfile& p) const override {
        return {fmt::format("name={}&from={}&until={}&format=pprof&sampleRate={}&spyName=beam-bpf",
                            url_escape(nullptr, pyroscope_name(p.service, p.labels)), p.start_unix_ns / 1'000'000'000ull,
                            (p.end_unix_ns + 999'999'999ull) / 1'000'000'000ull, p.frequency_hz),
                p.pprof_gz, p.kind};
    }
    std::string url(const std::string& configured, const PushItem& it) const override {
        std::string base = configured;
        while (base.ends_with("/")) base.pop_back();
        if (!base.ends_with("/ingest")) base += "/ingest";
        return base + "?" + it.query;
    }
    curl_mime* body(CURL* c, const PushItem& it, curl_slist*&) const override {
        curl_mime* mime = curl_mime_init(c);
        curl_mimepart* part = curl_mime_addpart(mime);
        curl_mime_name(part, "profile");
        curl_mime_filename(part, "profile.pb.gz");
        curl_mime_data(part, it.body.data(), it.body.size());
        part = curl_mime_addpart(mime);
        curl_mime_name(part, "sample_type_config");
        curl_mime_filename(part, "sample_type_config.json");
        curl_mime_data(part, it.kind == "alloc" ? kAllocSampleTypeConfig : kCpuSampleTypeConfig, CURL_ZERO_TERMINATED);
        curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
        return mime;
    }
    bool retryable(long status) const override { return status >= 500 || status == 429 || status == 408; }
};

}  // namespace

std::unique_ptr<PushProtocol> pyroscope_protocol() { return std::make_unique<Pyroscope>(); }

Pusher::Pusher(std::unique_ptr<PushProtocol> protocol, PushConfig cfg)
    : protocol_(std::move(protocol)), cfg_(std::move(cfg)) {
    static const bool global = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
    if (!global || !(curl_ = curl_easy_init()))
        throw UserError(fmt::format("{}: cannot start libcurl", protocol_->option()));
    thread_ = std::thread([this] { run(); });
}

Pusher::~Pusher() {
    {
        std::lock_guard l(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
    curl_easy_cleanup(static_cast<CURL*>(curl_));
}

void Pusher::enqueue(const FinishedProfile& p) {
    auto it = std::make_shared<const Item>(protocol_->item(p));
    {
        std::lock_guard l(mu_);
        queue_.push_back(std::move(it));
        c_.queue_bytes += queue_.back()->body.size();
        trim_locked();
    }
    cv_.notify_all();
}

void Pusher::trim_locked() {
    // The oldest go first; the newest profile is kept even alone over the bound (the one being
    // sent is counted too: it comes back first if it fails).
    while (queue_.size() > 1 && c_.queue_bytes > cfg_.queue_bytes) {
        c_.queue_bytes -= queue_.front()->body.size();
        queue_.pop_front();
        c_.dropped++;
    }
    c_.queue_profiles = queue_.size() + (inflight_ != nullptr);
}

void Pusher::flush(std::chrono::milliseconds deadline) {
    std::unique_lock l(mu_);
    cv_.wait_for(l, deadline, [&] { return queue_.empty() && !inflight_; });
}

void Pusher::reconfigure(PushConfig cfg) {
    {
        std::lock_guard l(mu_);
        cfg_ = std::move(cfg);
        trim_locked();
    }
    cv_.notify_all();
}

PushCounters Pusher::counters() const {
    std::lock_guard l(mu_);
    return c_;
}

std::string Pusher::send(const Item& it, const PushConfig& cfg, bool& retry, std::chrono::milliseconds& wait) {
    CURL* c = static_cast<CURL*>(curl_);
    retry = true;
    const std::string url = protocol_->url(cfg.url, it);
    std::string answer;

    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(cfg.timeout.count()));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(cfg.timeout.count()));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep_start);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &answer);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "beam-bpf-agent");
    curl_slist* headers = nullptr;
    for (const std::string& h : cfg.headers) headers = curl_slist_append(headers, h.c_str());
    std::string userpwd;
    if (!cfg.auth_file.empty()) {
        // Read at each push: a rotated credential is picked up without a reload.
        std::ifstream f(cfg.auth_file);
        std::stringstream ss;
        ss << f.rdbuf();
        std::string auth = trimmed(ss.str().substr(0, 4096));
        if (!f || auth.empty()) {
            retry = true;
            curl_slist_free_all(headers);
            return fmt::format("cannot read the credentials in {}", cfg.auth_file);
        }
        if (auth.rfind("Bearer ", 0) == 0 || auth.rfind("bearer ", 0) == 0) {
            headers = curl_slist_append(headers, ("Authorization: Bearer " + trimmed(auth.substr(7))).c_str());
        } else {
            userpwd = auth;
            curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
            curl_easy_setopt(c, CURLOPT_USERPWD, userpwd.c_str());
        }
    }
    curl_mime* mime = protocol_->body(c, it, headers);
    if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);

    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_off_t after = 0;  // libcurl reads both forms of Retry-After
    wait = curl_easy_getinfo(c, CURLINFO_RETRY_AFTER, &after) == CURLE_OK && after > 0
               ? std::chrono::seconds(std::min<curl_off_t>(after, 24 * 3600))
               : std::chrono::milliseconds(0);
    curl_mime_free(mime);
    curl_slist_free_all(headers);
    if (rc != CURLE_OK) return curl_easy_strerror(rc);
    if (status >= 200 && status < 300) {
        retry = false;  // a store that took part of it must not get it again
        return protocol_->refused(answer);
    }
    retry = protocol_->retryable(status);
    return fmt::format("HTTP {}", status);
}

void Pusher::run() {
    auto backoff = std::chrono::milliseconds(0);
    std::unique_lock l(mu_);
    while (!stop_) {
        // After a failure wait `backoff` (new profiles do not cut it short); else for work.
        if (backoff.count()) cv_.wait_for(l, backoff, [&] { return stop_; });
        cv_.wait(l, [&] { return stop_ || !queue_.empty(); });
        if (stop_) break;
        inflight_ = queue_.front();
        queue_.pop_front();
        PushConfig cfg = cfg_;
        l.unlock();
        bool retry = false;
        std::chrono::milliseconds wait{0};
        std::string err = send(*inflight_, cfg, retry, wait);
        l.lock();
        if (err.empty() || !retry) {
            c_.queue_bytes -= inflight_->body.size();
            inflight_.reset();
            c_.queue_profiles = queue_.size();
            if (err.empty()) {
                c_.pushed++;
            } else {
                c_.failures++;
                c_.rejected++;
                c_.last_error = err;
            }
            backoff = {};
            cv_.notify_all();  // flush() waits for an empty queue
            continue;
        }
        c_.failures++;
        c_.last_error = err;
        queue_.push_front(std::move(inflight_));  // still the oldest: the first to drop
        inflight_.reset();
        trim_locked();
        // The store's Retry-After (OTLP/HTTP: the client SHOULD honour it) within the bound.
        backoff = std::min(cfg.max_backoff, std::max(wait, backoff.count() ? backoff * 2 : std::chrono::milliseconds(500)));
    }
}

}  // namespace bb::agent
