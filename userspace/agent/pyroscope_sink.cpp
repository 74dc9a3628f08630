// Grafana Pyroscope's ingest API (POST /ingest, multipart pprof): what differs from OTLP's
// (push_protocol.hpp); the queue, retries, TLS and credentials are the Pusher's (sinks.cpp).
#include <curl/curl.h>
#include <fmt/format.h>

#include <cctype>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "agent/push_protocol.hpp"
#include "agent/sinks.hpp"
#include "profile/kinds.hpp"

namespace bb::agent {

std::string pyroscope_name(const std::string& service, const std::vector<std::pair<std::string, std::string>>& labels) {
    auto value = [](std::string v) {
        for (char& c : v)
            if (std::strchr("{},=\"", c) || static_cast<unsigned char>(c) < 0x20 ||
                static_cast<unsigned char>(c) >= 0x7f)
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

// What Pyroscope should make of the profile's sample type (report/pprof.cpp): the CPU time,
// the bytes allocated (alloc_space, as Go's heap profiles), the nanoseconds of process time or
// of threads blocked; summed, sampled (profile/kinds.hpp names them).
std::string sample_type_config(const std::string& kind) {
    const ProfileKind* k = agent_kind(kind);
    if (!k) k = &kind_of("samples");
    return fmt::format(R"({{"{0}":{{"units":"{1}","aggregation":"sum","display-name":"{0}","sampled":true}}}})",
                       k->pyroscope_type, k->pyroscope_units);
}

class Pyroscope : public PushProtocol {
public:
    const char* option() const override { return "--push"; }
    PushItem item(const FinishedProfile& p) const override {
        return {fmt::format("name={}&from={}&until={}&format=pprof&sampleRate={}&spyName=beam-bpf",
                            url_escape(nullptr, pyroscope_name(p.service, p.labels)),
                            p.start_unix_ns / 1'000'000'000ull, (p.end_unix_ns + 999'999'999ull) / 1'000'000'000ull,
                            p.frequency_hz),
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
        curl_mime_data(part, sample_type_config(it.kind).c_str(), CURL_ZERO_TERMINATED);  // copied
        curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
        return mime;
    }
    bool retryable(long status) const override { return status >= 500 || status == 429 || status == 408; }
};

}  // namespace

std::unique_ptr<PushProtocol> pyroscope_protocol() { return std::make_unique<Pyroscope>(); }

}  // namespace bb::agent
