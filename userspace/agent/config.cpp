#include "agent/config.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <regex>

#include "base/error.hpp"

namespace bb::agent {

namespace {

template <typename T>
T number(const std::string& key, const std::string& v) {
    T out{};
    auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
    if (ec != std::errc() || end != v.data() + v.size()) throw UserError(fmt::format("{}={}: not a number", key, v));
    return out;
}

std::string trim(const std::string& s) {
    size_t b = s.find_first_not_of(" \t\r"), e = s.find_last_not_of(" \t\r");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

}  // namespace

void set_option(AgentConfig& c, const std::string& key, const std::string& v) {
    if (key == "every") c.every = number<double>(key, v);
    else if (key == "frequency") c.frequency = number<uint64_t>(key, v);
    else if (key == "native-depth") c.native_depth = number<uint32_t>(key, v);
    else if (key == "events") {
        if (v != "cpu" && v != "cpu,alloc" && v != "alloc,cpu")
            throw UserError(fmt::format("events={}: cpu, or cpu,alloc (CPU profiles are always made)", v));
        c.alloc = v != "cpu";
    } else if (key == "alloc-period") c.alloc_period = number<uint64_t>(key, v);
    else if (key == "unwind-rows") c.unwind_rows = number<uint32_t>(key, v);
    else if (key == "output") c.output = v;
    else if (key == "retention") c.retention = number<size_t>(key, v);
    else if (key == "push") c.push.url = v;
    else if (key == "push-auth") c.push.auth_file = v;
    else if (key == "push-tenant") c.push.headers.push_back("X-Scope-OrgID: " + v);
    else if (key == "otlp") c.otlp.url = v;
    else if (key == "otlp-auth") c.otlp.auth_file = v;
    else if (key == "otlp-header") c.otlp.headers.push_back(v);
    // Each store has its own queue, of this bound and backoff.
    else if (key == "queue-bytes") c.push.queue_bytes = c.otlp.queue_bytes = number<size_t>(key, v);
    else if (key == "max-backoff")
        c.push.max_backoff = c.otlp.max_backoff = std::chrono::milliseconds(static_cast<int64_t>(number<double>(key, v) * 1000));
    else if (key == "match") c.match.push_back(v);
    else if (key == "stats") c.stats_file = v;
    else if (key == "metrics") c.metrics_port = number<int>(key, v);
    else if (key == "host") c.host = v;
    else if (key == "service") c.service = v;
    else if (key.starts_with("service.") && key.size() > 8) c.service_by_node[key.substr(8)] = v;
    else if (key.starts_with("label.") && key.size() > 6) c.labels.emplace_back(key.substr(6), v);
    else throw UserError(fmt::format("unknown setting {}", key));
}

void load_config_file(const std::string& path, AgentConfig& c) {
    std::ifstream f(path);
    if (!f) throw UserError(fmt::format("cannot read the configuration {}", path));
    std::string line;
    for (int no = 1; std::getline(f, line); no++) {
        if (line.size() > 4096) throw UserError(fmt::format("{}:{}: line too long", path, no));
        std::string t = trim(line);
        if (t.empty() || t[0] == '#') continue;
        size_t eq = t.find('=');
        if (eq == std::string::npos) throw UserError(fmt::format("{}:{}: not key=value", path, no));
        try {
            set_option(c, trim(t.substr(0, eq)), trim(t.substr(eq + 1)));
        } catch (const UserError& e) {
            throw UserError(fmt::format("{}:{}: {}", path, no, e.what()));
        }
    }
}

void check(const AgentConfig& c) {
    if (c.every < 1) throw UserError(fmt::format("--every {}: at least 1 second", c.every));
    if (c.metrics_port < -1 || c.metrics_port > 65535) throw UserError(fmt::format("--metrics {}: a port", c.metrics_port));
    if (c.unwind_rows < (64u << 10) || c.unwind_rows > (64u << 20))
        throw UserError(fmt::format("--unwind-rows {}: 65536 to 67108864 (10 bytes of kernel memory each)", c.unwind_rows));
    if (c.frequency == 0 || c.frequency > 100000) throw UserError(fmt::format("-F {}: 1 to 100000 Hz", c.frequency));
    if (c.alloc_period && (c.alloc_period < 64 || c.alloc_period > 0xffffffffull))
        throw UserError(fmt::format("--alloc-period {}: 64 to 4294967295 words", c.alloc_period));
    if (c.output == "none" && c.push.url.empty() && c.otlp.url.empty())
        throw UserError("--output none without --push or --otlp: the profiles would go nowhere");
    for (const std::string& m : c.match) {
        try {
            std::regex re(m);
        } catch (const std::regex_error& e) {
            throw UserError(fmt::format("--match {}: not a regular expression: {}", m, e.what()));
        }
    }
    for (const auto& [option, push] : {std::pair{"--push", &c.push}, std::pair{"--otlp", &c.otlp}}) {
        if (!push->url.empty() && !push->url.starts_with("http://") && !push->url.starts_with("https://"))
            throw UserError(fmt::format("{} {}: an http:// or https:// URL", option, push->url));
        // A header is one line: no byte that could end it and start another.
        for (const std::string& h : push->headers)
            if (h.find(':') == std::string::npos || h.find(':') == 0 ||
                std::any_of(h.begin(), h.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x20 && ch != '\t'; }))
                throw UserError(fmt::format("{} header '{}': one line 'Name: value'", option, h));
    }
}

}  // namespace bb::agent
