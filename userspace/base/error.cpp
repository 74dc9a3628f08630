#include "base/error.hpp"

#include <fmt/format.h>

namespace bb {

namespace {
const char* g_tool = "beam-bpf";
}

const char* tool_name() { return g_tool; }

int guarded_main(const char* prog, const std::function<int()>& body) {
    g_tool = prog;
    try {
        return body();
    } catch (const std::exception& e) {
        fmt::print(stderr, "{}: error: {}\n", prog, e.what());
    }
    return 1;
}

}  // namespace bb
