#!/usr/bin/env bash
# Sets up (packages + build) and runs every test: unit tests, and integration tests that load
# the BPF program into this kernel and profile real Erlang VMs. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --tests
# A beam.smp with DWARF, built from the Debian source of the installed VM (a few minutes the
# first time, then cached in /var/tmp): the offsets test checks the shipped table against it.
echo "test.sh: debug VM for the offsets check: $(scripts/build-debug-vm.sh | tail -n 1)"
# The OTP 27 and OTP 29 test VMs, built as kerl/asdf users build theirs (about 4 and 3.5 minutes
# the first time on 2 cores, then cached in /var/tmp): the test matrix (tests/integration/
# harness.hpp) runs on them too.
echo "test.sh: OTP 27 test VMs: $(scripts/build-test-vms.sh 27 | tail -n 1)"
echo "test.sh: OTP 29 test VMs: $(scripts/build-test-vms.sh 29 | tail -n 1)"
(cd build && ctest --output-on-failure --timeout 600 "$@")
# The agent's systemd unit and Kubernetes DaemonSet example: linted, and every option and setting
# they pass checked by the built agent (no cluster here).
packaging/check.py build
# The same tests under AddressSanitizer and UndefinedBehaviorSanitizer, and the fuzz targets
# (BB_SKIP_SANITIZE=1 skips this pass when iterating locally).
[ -n "${BB_SKIP_SANITIZE:-}" ] || scripts/sanitize.sh
