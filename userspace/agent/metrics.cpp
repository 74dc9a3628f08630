#include "agent/metrics.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <microhttpd.h>
#include <netinet/in.h>

#include <cstring>

#include "base/error.hpp"

namespace bb::agent {

std::string prometheus_label(const std::string& v) {
    std::string out;
    for (unsigned char c : v) {
        if (c == '\\' || c == '"') out += '\\', out += static_cast<char>(c);
        else if (c == '\n') out += "\\n";
        else if (c < 0x20 || c == 0x7f) out += '?';
        else out += static_cast<char>(c);
    }
    return out;
}

namespace {

MHD_Result answer(void* cls, MHD_Connection* c, const char* url, const char* method, const char*, const char*, size_t*,
                  void**) {
    const auto* self = static_cast<const MetricsEndpoint*>(cls);
    const bool ok = std::strcmp(method, "GET") == 0 && std::strcmp(url, "/metrics") == 0;
    std::string body = ok ? self->text() : "beam-bpf-agent: GET /metrics\n";
    MHD_Response* r = MHD_create_response_from_buffer(body.size(), body.data(), MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4; charset=utf-8");
    MHD_Result ret = MHD_queue_response(c, ok ? MHD_HTTP_OK : MHD_HTTP_NOT_FOUND, r);
    MHD_destroy_response(r);
    return ret;
}

}  // namespace

MetricsEndpoint::MetricsEndpoint(uint16_t port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);  // localhost only: no authentication here
    MHD_Daemon* d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, port, nullptr, nullptr,
                                     &answer, this, MHD_OPTION_SOCK_ADDR, &addr, MHD_OPTION_CONNECTION_LIMIT, 8u,
                                     MHD_OPTION_CONNECTION_TIMEOUT, 5u, MHD_OPTION_END);
    if (!d) throw UserError(fmt::format("--metrics {}: cannot listen on 127.0.0.1:{}", port, port));
    daemon_ = d;
    const MHD_DaemonInfo* info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    port_ = info ? info->port : port;
}

MetricsEndpoint::~MetricsEndpoint() { MHD_stop_daemon(static_cast<MHD_Daemon*>(daemon_)); }

void MetricsEndpoint::set(std::string text) {
    std::lock_guard l(mu_);
    text_ = std::move(text);
}

std::string MetricsEndpoint::text() const {
    std::lock_guard l(mu_);
    return text_;
}

}  // namespace bb::agent
