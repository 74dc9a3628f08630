// The agent's counters as a Prometheus text endpoint on localhost (GET /metrics), served by
// libmicrohttpd's own thread from the last text the agent's loop set (once a second).
#pragma once
#include <cstdint>
#include <mutex>
#include <string>

namespace bb::agent {

// A label value of the text format: \\, \" and \n escaped as it says, other control bytes as
// '?' (node and service names are the target's say).
std::string prometheus_label(const std::string& v);

class MetricsEndpoint {
public:
    // 127.0.0.1:`port` (0: any free port); UserError when it cannot listen.
    explicit MetricsEndpoint(uint16_t port);
    ~MetricsEndpoint();
    MetricsEndpoint(const MetricsEndpoint&) = delete;
    MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

    uint16_t port() const { return port_; }
    void set(std::string text);
    std::string text() const;

private:
    mutable std::mutex mu_;
    std::string text_;
    void* daemon_ = nullptr;  // MHD_Daemon*
    uint16_t port_ = 0;
};

}  // namespace bb::agent
