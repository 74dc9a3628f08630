// Fault injection for the tests, compiled into test builds only. The installed tools link
// test_hooks_off.cpp: every hook is off whatever the environment says. The copies of the tools
// the integration tests run with a hook (build/test-tools/, see tests/integration/harness.cpp)
// and the test binaries link test_hooks_on.cpp, which reads BB_INJECT_*.
#pragma once
#include <cstdint>

namespace bb::test_hooks {

// BB_INJECT_HANDLER_ERROR=N: every Nth record's handler throws, as a symbolizer bug would
// (0: never).
uint64_t handler_error_every();
// BB_INJECT_UNWIND_GARBAGE=1: unwind rows whose rules match nothing in the code.
bool unwind_garbage();

}  // namespace bb::test_hooks
