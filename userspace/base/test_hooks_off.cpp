// The installed tools' hooks: all off (base/test_hooks.hpp).
#include "base/test_hooks.hpp"

namespace bb::test_hooks {

uint64_t handler_error_every() { return 0; }
bool unwind_garbage() { return false; }

}  // namespace bb::test_hooks
