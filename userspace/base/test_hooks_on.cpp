// The test builds' hooks: from the environment (base/test_hooks.hpp).
#include "base/test_hooks.hpp"

#include <cstdlib>

namespace bb::test_hooks {

uint64_t handler_error_every() {
    const char* n = std::getenv("BB_INJECT_HANDLER_ERROR");
    return n ? std::strtoull(n, nullptr, 10) : 0;
}
bool unwind_garbage() { return std::getenv("BB_INJECT_UNWIND_GARBAGE") != nullptr; }

}  // namespace bb::test_hooks
