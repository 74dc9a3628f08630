#include "base/error.hpp"

#include "base/text.hpp"

#include <fmt/format.h>
#include <cstring>
#include <sys/resource.h>

namespace bb {

namespace {
const char* g_tool = "beam-bpf";
}

const char* tool_name() { return g_tool; }

int guarded_main(const char* prog, const std::function<int()>& body) {
    g_tool = prog;
    // Descriptors up to the hard limit: one per VM thread (per-thread perf events) plus the
    // target's files; the soft default (1,024) is what a VM with +SDio 700 outgrows.
    rlimit nofile{};
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
        nofile.rlim_cur = nofile.rlim_max;
        setrlimit(RLIMIT_NOFILE, &nofile);
    }
    try {
        return body();
    } catch (const std::exception& e) {  // a message may hold the target's text (a path, a name)
        fmt::print(stderr, "{}: error: {}\n", prog, printable(e.what()));
    }
    return 1;
}

std::string errno_text(int err) { return std::strerror(err < 0 ? -err : err); }

}  // namespace bb
