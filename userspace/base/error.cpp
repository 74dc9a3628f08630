#include "base/error.hpp"

#include "base/text.hpp"

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
    } catch (const std::exception& e) {  // a message may hold the target's text (a path, a name)
        fmt::print(stderr, "{}: error: {}\n", prog, printable(e.what()));
    }
    return 1;
}

}  // namespace bb
