#include "agent/sinks.hpp"

#include "target/discovery.hpp"  // clean()
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
#include "base/text.hpp"

namespace bb::agent {

namespace fs = std::filesystem;

namespace {

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

// A small file of secrets (credentials, headers), read whole at each request: at most `limit`
// bytes. "" when read, else why not (its path, never its content).
std::string read_secret(const std::string& path, size_t limit, std::string& out) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fmt::format("cannot read {}: {}", path, std::strerror(errno));
    out.assign(limit + 1, '\0');
    size_t got = 0;
    ssize_t n = 0;
    while (got < out.size() && (n = read(fd, out.data() + got, out.size() - got)) > 0) got += n;
    const int err = errno;
    close(fd);
    out.resize(got);
    if (n < 0) return fmt::format("cannot read {}: {}", path, std::strerror(err));
    if (got > limit) return fmt::format("{} is larger than {} bytes", path, limit);
    return {};
}

// The headers of a --push-headers-file: "Name: value" lines; blank lines and "#" comments
// skipped. "" when all were added to `headers`, else why not (a line's number, never its value).
std::string add_file_headers(const std::string& path, curl_slist*& headers) {
    std::string text;
    if (std::string why = read_secret(path, 64 << 10, text); !why.empty()) return why;
    std::istringstream in(text);
    std::string line;
    for (int n = 1; std::getline(in, line); n++) {
        if (line.ends_with('\r')) line.pop_back();
        if (trimmed(line).empty() || trimmed(line).starts_with('#')) continue;
        // A control byte would end the header and start another (header injection); a tab is
        // a header's own whitespace.
        if (has_control_byte(line, true)) return fmt::format("line {} of {} holds a control byte", n, path);
        size_t colon = line.find(':');
        if (colon == 0 || colon == std::string::npos || line.find_first_of(" \t") < colon)
            return fmt::format("line {} of {} is not \"Name: value\"", n, path);
        headers = curl_slist_append(headers, line.c_str());
    }
    return {};
}

// What kind of failure a libcurl error is: a change of kind is said at once.
std::string cause_of(CURLcode rc) {
    switch (rc) {
    case CURLE_COULDNT_CONNECT: return "no connection";
    case CURLE_COULDNT_RESOLVE_HOST: return "unknown host";
    case CURLE_OPERATION_TIMEDOUT: return "timeout";
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_PEER_FAILED_VERIFICATION:
    case CURLE_SSL_CERTPROBLEM:
    case CURLE_SSL_CIPHER:
    case CURLE_SSL_CACERT_BADFILE:
    case CURLE_SSL_ISSUER_ERROR:
    case CURLE_SSL_CLIENTCERT: return "TLS";
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING: return "connection lost";
    default: return curl_easy_strerror(rc);
    }
}

// Stop asking: the Pusher is going away (its destructor sets the flag).
int abort_check(void* abort, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    return static_cast<const std::atomic<bool>*>(abort)->load() ? 1 : 0;
}

// The URL as said in lines: no query (it may carry a token), no more than the store.
std::string shown(const std::string& url) { return url.substr(0, url.find('?')); }

// A failure's wait, its own or the store's: 0.5 s doubling with each failure after `free`
// ones, up to `cap`, or the store's Retry-After if longer (still at most `cap`).
std::chrono::milliseconds backoff(unsigned failures, unsigned free, std::chrono::milliseconds retry_after,
                                  std::chrono::milliseconds cap) {
    std::chrono::milliseconds b{0};
    if (failures > free) b = std::chrono::milliseconds(500) * (1u << std::min(failures - free - 1, 16u));
    return std::min(cap, std::max(b, retry_after));
}

// A 401 or 403 is tried this many times (at most max_tries): enough for a credential being
// rotated (the file is read at each request), not a flood of refused requests.
constexpr unsigned kAuthTries = 3;
constexpr auto kLinePeriod = std::chrono::minutes(1);

}  // namespace

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
    abort_ = true;
    cv_.notify_all();
    thread_.join();
    curl_easy_cleanup(static_cast<CURL*>(curl_));
}

void Pusher::enqueue(const FinishedProfile& p) {
    auto it = std::make_shared<const Item>(protocol_->item(p));
    {
        std::lock_guard l(mu_);
        const auto now = Clock::now();
        c_.queue_bytes += it->body.size();
        queue_.push_back({std::move(it), next_seq_++, 0, now, now});
        trim_locked();
    }
    cv_.notify_all();
}

void Pusher::trim_locked() {
    // The oldest go first; the newest profile is kept even alone over the bound (the one being
    // sent is counted too: it comes back if it fails).
    while (queue_.size() > 1 && c_.queue_bytes > cfg_.queue_bytes) {
        c_.queue_bytes -= queue_.front().item->body.size();
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

void Pusher::say(const std::string& line) const {
    fmt::print(stderr, "beam-bpf-agent: {}: {}\n", protocol_->option(), line);
}

void Pusher::done_locked(const Queued& q) {
    c_.queue_bytes -= q.item->body.size();
    c_.queue_profiles = queue_.size() + (inflight_ != nullptr);
}

void Pusher::give_up_locked(const Queued& q, const std::string& why) {
    done_locked(q);
    c_.given_up++;
    // One line at the first, then at most one a minute with how many since.
    const auto now = Clock::now();
    lines_.given_up_unsaid++;
    if (lines_.given_up_at != Clock::time_point{} && now - lines_.given_up_at < kLinePeriod) return;
    const auto age = std::chrono::duration_cast<std::chrono::seconds>(now - q.enqueued).count();
    say(lines_.given_up_unsaid == 1
            ? fmt::format("gave up a {} profile after {} tries over {} s: {}", q.item->kind, q.tries, age, why)
            : fmt::format("gave up {} profiles since the last such line, the last a {} profile after {} tries over {} "
                          "s: {}",
                          lines_.given_up_unsaid, q.item->kind, q.tries, age, why));
    lines_.given_up_unsaid = 0;
    lines_.given_up_at = now;
}

void Pusher::failed_locked(const Sent& s) {
    const auto now = Clock::now();
    const bool changed = s.cause != lines_.cause;
    const bool quiet = lines_.at != Clock::time_point{} && now - lines_.at < kLinePeriod;
    const bool was_failing = lines_.failing;
    lines_.failing = true;
    lines_.unsaid++;
    // A new cause is said at once; the same one at most once a minute, even across successes
    // in between (one profile the store fails, tried again and again).
    if (!changed && quiet) return;
    say(!changed && was_failing
            ? fmt::format("pushing to {} still fails: {} failures in {} s, the last: {}", shown(cfg_.url),
                          lines_.unsaid, std::chrono::duration_cast<std::chrono::seconds>(now - lines_.at).count(),
                          s.detail)
            : fmt::format("pushing to {} fails: {}{}", shown(cfg_.url), s.detail,
                          lines_.unsaid > 1 ? fmt::format(" ({} failures since the last line)", lines_.unsaid) : ""));
    lines_.said = true;
    lines_.cause = s.cause;
    lines_.at = now;
    lines_.unsaid = 0;
}

void Pusher::succeeded_locked() {
    // Only after a line said it failed, and once.
    if (lines_.failing && lines_.said) {
        say(fmt::format("pushing to {} works again{}", shown(cfg_.url),
                        lines_.unsaid ? fmt::format(" after {} more failures", lines_.unsaid) : std::string()));
        lines_.said = false;
        lines_.unsaid = 0;
        lines_.at = Clock::now();
    }
    lines_.failing = false;
}

Pusher::Sent Pusher::send(const Item& it, const PushConfig& cfg) {
    CURL* c = static_cast<CURL*>(curl_);
    const std::string url = protocol_->url(cfg.url, it);
    std::string answer;
    char error[CURL_ERROR_SIZE] = "";

    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(cfg.timeout.count()));
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(cfg.timeout.count()));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, keep_start);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &answer);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "beam-bpf-agent");
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, error);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, abort_check);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &abort_);
    // libcurl reads no SSL_CERT_FILE of its own; OpenSSL's tools and most clients do.
    std::string ca = cfg.ca_file;
    if (const char* env = std::getenv("SSL_CERT_FILE"); ca.empty() && env) ca = env;
    if (!ca.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, ca.c_str());
    if (!cfg.client_cert.empty()) {
        curl_easy_setopt(c, CURLOPT_SSLCERT, cfg.client_cert.c_str());
        curl_easy_setopt(c, CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (!cfg.client_key.empty()) {
        curl_easy_setopt(c, CURLOPT_SSLKEY, cfg.client_key.c_str());
        curl_easy_setopt(c, CURLOPT_SSLKEYTYPE, "PEM");
    }

    // The headers and credentials are read at each push: a rotated one is picked up without a
    // reload. Their values are never said: only which file failed.
    std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> headers(nullptr, curl_slist_free_all);
    auto add = [&](const std::string& h) { headers.reset(curl_slist_append(headers.release(), h.c_str())); };
    for (const std::string& h : cfg.headers) add(h);
    if (!cfg.headers_file.empty()) {
        curl_slist* h = headers.release();
        std::string why = add_file_headers(cfg.headers_file, h);
        headers.reset(h);
        if (!why.empty()) return {.cause = "headers file", .detail = why};
    }
    if (!cfg.auth_file.empty()) {
        std::string auth;
        std::string why = read_secret(cfg.auth_file, 4096, auth);
        auth = trimmed(auth);
        if (why.empty() && auth.empty()) why = cfg.auth_file + " is empty";
        if (why.empty() && has_control_byte(auth, true)) why = cfg.auth_file + " holds a control byte";
        if (!why.empty()) return {.cause = "credentials file", .detail = why};
        if (auth.rfind("Bearer ", 0) == 0 || auth.rfind("bearer ", 0) == 0) {
            add("Authorization: Bearer " + trimmed(auth.substr(7)));
        } else {
            curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BASIC);
            curl_easy_setopt(c, CURLOPT_USERPWD, auth.c_str());  // libcurl copies it
        }
    }
    curl_slist* h = headers.release();
    std::unique_ptr<curl_mime, decltype(&curl_mime_free)> mime(protocol_->body(c, it, h), curl_mime_free);
    headers.reset(h);
    if (headers) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());

    const CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    Sent s;
    curl_off_t after = 0;  // libcurl reads both forms of Retry-After
    if (curl_easy_getinfo(c, CURLINFO_RETRY_AFTER, &after) == CURLE_OK && after > 0)
        s.wait = std::chrono::seconds(std::min<curl_off_t>(after, 24 * 3600));
    if (status >= 200 && status < 300) {
        // Delivered even if the answer's body was cut off after: sent again, the store would
        // ingest it twice. A store that took part of it must not get it again either.
        s.detail = protocol_->refused(answer);
        s.result = s.detail.empty() ? Sent::delivered : Sent::refused;
        s.cause = "refused";
        return s;
    }
    if (rc != CURLE_OK) {
        s.cause = cause_of(rc);
        s.detail = error[0] ? fmt::format("{} ({})", clean(error, 256), curl_easy_strerror(rc))
                            : curl_easy_strerror(rc);
        return s;
    }
    s.cause = fmt::format("HTTP {}", status);
    s.detail = s.cause;
    s.answered = true;
    if (status == 401 || status == 403) {
        s.auth = true;
        s.detail += cfg.auth_file.empty() ? ": the store wants credentials"
                                          : fmt::format(": the store refused the credentials of {}", cfg.auth_file);
    } else if (!protocol_->retryable(status)) {
        s.result = Sent::refused;
        s.detail += ": the store refuses this profile, not sent again";
    }
    return s;
}

void Pusher::run() {
    std::unique_lock l(mu_);
    while (!stop_) {
        const auto now = Clock::now();
        // Profiles past their age go first, wherever they are in the queue.
        for (auto q = queue_.begin(); q != queue_.end();) {
            if (now - q->enqueued <= cfg_.max_age) {
                ++q;
                continue;
            }
            Queued old = std::move(*q);
            q = queue_.erase(q);
            give_up_locked(old, fmt::format("older than {} s", cfg_.max_age.count()));
        }
        // The oldest profile whose own wait is over, once the store's is.
        auto next = queue_.end();
        auto wake = store_ready_;
        if (now >= store_ready_) {
            wake = Clock::time_point::max();
            for (auto q = queue_.begin(); q != queue_.end(); ++q) {
                if (q->next_try <= now) {
                    next = q;
                    break;
                }
                wake = std::min(wake, q->next_try);
            }
        }
        if (next == queue_.end()) {
            if (queue_.empty()) cv_.notify_all();  // flush() waits for an empty queue
            if (wake == Clock::time_point::max()) cv_.wait(l);
            else cv_.wait_until(l, std::min(wake, now + cfg_.max_age));
            continue;
        }
        Queued q = std::move(*next);
        queue_.erase(next);
        inflight_ = q.item;
        const PushConfig cfg = cfg_;
        l.unlock();
        const Sent s = send(*q.item, cfg);
        l.lock();
        inflight_.reset();
        if (abort_) {  // stopping: it stays queued, counted as left unsent
            queue_.push_front(std::move(q));
            break;
        }
        if (s.result != Sent::failed || s.answered) q.tries++;
        if (s.result == Sent::delivered) {
            c_.pushed++;
            done_locked(q);
            succeeded_locked();
            failed_in_row_ = 0;
        } else if (s.result == Sent::refused) {
            // The store answered: it works, but will never take this one.
            c_.failures++;
            c_.rejected++;
            c_.last_error = s.detail;
            done_locked(q);
            failed_locked(s);
            failed_in_row_ = 0;
        } else {
            c_.failures++;
            c_.last_error = s.detail;
            failed_locked(s);
            // One failure alone may be this profile's: the next one is sent at once. Failures
            // in a row are the store's: it is left alone, longer each time.
            store_ready_ = Clock::now() + backoff(++failed_in_row_, 1, s.wait, cfg.max_backoff);
            if (s.answered && q.tries >= (s.auth ? std::min(kAuthTries, cfg.max_tries) : cfg.max_tries)) {
                give_up_locked(q, s.detail);
            } else {
                q.next_try = Clock::now() + backoff(q.tries, 0, s.wait, cfg.max_backoff);
                auto at = std::upper_bound(queue_.begin(), queue_.end(), q.seq,
                                           [](uint64_t seq, const Queued& e) { return seq < e.seq; });
                queue_.insert(at, std::move(q));
                trim_locked();
            }
        }
        c_.queue_profiles = queue_.size();
        cv_.notify_all();  // flush() waits for an empty queue
    }
}

}  // namespace bb::agent
