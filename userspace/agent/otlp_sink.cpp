// The OTLP/HTTP sink of the profiles signal: what differs from Pyroscope's (push_protocol.hpp).
#include <fmt/format.h>

#include <charconv>
#include <map>

#include "agent/push_protocol.hpp"
#include "agent/sinks.hpp"
#include "opentelemetry/proto/collector/profiles/v1development/profiles_service.pb.h"

namespace bb::agent {

namespace {

class Otlp : public PushProtocol {
public:
    const char* option() const override { return "--otlp"; }
    PushItem item(const FinishedProfile& p) const override { return {"", p.otlp, p.kind}; }
    // The OTLP/HTTP default path when the URL has none; else the URL as configured.
    std::string url(const std::string& configured, const PushItem&) const override {
        size_t scheme = configured.find("://");
        size_t path = configured.find('/', scheme == std::string::npos ? 0 : scheme + 3);
        if (path != std::string::npos && configured.substr(path) != "/") return configured;
        return configured.substr(0, path) + "/v1development/profiles";
    }
    curl_mime* body(CURL* c, const PushItem& it, curl_slist*& headers) const override {
        headers = curl_slist_append(headers, "Content-Type: application/x-protobuf");
        headers = curl_slist_append(headers, "Content-Encoding: gzip");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, it.body.data());
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(it.body.size()));
        return nullptr;
    }
    // The OTLP/HTTP specification's retryable codes; every other 4xx and 5xx must not be retried.
    bool retryable(long status) const override {
        return status == 429 || status == 502 || status == 503 || status == 504;
    }
    // A partial success: the receiver took some of the request and says why not the rest.
    std::string refused(const std::string& answer) const override {
        opentelemetry::proto::collector::profiles::v1development::ExportProfilesServiceResponse r;
        if (answer.empty() || !r.ParseFromString(answer) || r.partial_success().rejected_profiles() == 0) return {};
        return fmt::format("{} profiles refused: {}", r.partial_success().rejected_profiles(),
                           r.partial_success().error_message().substr(0, 256));
    }
};

}  // namespace

std::unique_ptr<PushProtocol> otlp_protocol() { return std::make_unique<Otlp>(); }

std::vector<OtlpAttribute> otlp_resource(const std::vector<std::pair<std::string, std::string>>& labels) {
    // The semantic conventions' names where there is one; the numbers as numbers.
    static const std::map<std::string, std::string> named{
        {"service_name", "service.name"},
        {"host", "host.name"},
        {"os_pid", "process.pid"},
        {"ns_pid", "process.vpid"},
        {"erts_version", "process.runtime.version"},
        {"container_id", "container.id"},
        {"cgroup", "process.linux.cgroup"},
        {"node", "beam.node"},
        {"release", "beam.release"},
        {"otp_release", "beam.otp_release"},
    };
    std::vector<OtlpAttribute> out{{"process.runtime.name", std::string("BEAM")}};
    for (const auto& [k, v] : labels) {
        if (v.empty()) continue;
        auto it = named.find(k);
        const std::string key = it == named.end() ? k : it->second;
        int64_t n = 0;
        auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
        if ((key == "process.pid" || key == "process.vpid") && ec == std::errc() && end == v.data() + v.size())
            out.emplace_back(key, n);
        else out.emplace_back(key, v);
    }
    return out;
}

}  // namespace bb::agent
