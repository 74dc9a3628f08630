// What differs between the stores a Pusher sends to (sinks.hpp): the request one profile makes,
// its URL, body and headers, and which failures are worth another try. The queue, the thread,
// the backoff, the credentials and the counters are the Pusher's, the same for every store.
#pragma once
#include <curl/curl.h>

#include <string>

#include "agent/sinks.hpp"

namespace bb::agent {

class PushProtocol {
public:
    virtual ~PushProtocol() = default;
    virtual const char* option() const = 0;  // "--push": the sink, in messages
    // The queued request of one finished profile.
    virtual PushItem item(const FinishedProfile& p) const = 0;
    // The URL of a request to the store configured as `configured`.
    virtual std::string url(const std::string& configured, const PushItem& it) const = 0;
    // Sets the body on `c` and adds its headers; a curl_mime it made is freed after the request.
    virtual curl_mime* body(CURL* c, const PushItem& it, curl_slist*& headers) const = 0;
    // Whether a failed request's HTTP status may succeed if sent again.
    virtual bool retryable(long status) const = 0;
    // What a 2xx answer (its first bytes) says the store refused, "" when it took everything.
    virtual std::string refused(const std::string& /*answer*/) const { return {}; }
};

}  // namespace bb::agent
