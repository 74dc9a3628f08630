#!/usr/bin/env bash
# Sets up (packages + build) and runs every test: unit tests, and integration tests that load
# the BPF program into this kernel and profile real Erlang VMs. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cd build
ctest --output-on-failure --timeout 600 "$@"
