#!/usr/bin/env bash
# Installs what beam-bpf needs on Debian 12 and builds it into ./build. Run as root.
#   scripts/setup.sh                 packages to build and run the tools (and the demo), + build
#   scripts/setup.sh --tests         also what the tests and the bench use, and the tests built
#   BB_SKIP_APT=1 scripts/setup.sh   build only
set -euo pipefail
cd "$(dirname "$0")/.."
tests=
[ "${1:-}" = --tests ] && tests=1

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: run as root (it installs packages; the tools need root or CAP_BPF/CAP_PERFMON/CAP_SYS_PTRACE)" >&2
  exit 1
fi

packages=(
  build-essential cmake pkg-config            # C++ build
  clang llvm bpftool libbpf-dev               # BPF object, skeleton, loader
  libelf-dev libdw-dev                        # ELF symbols, DWARF offsets, native symbolization
  libdebuginfod-dev                           # a stripped VM's debug file by build-id (DEBUGINFOD_URLS)
  libcli11-dev libfmt-dev                     # CLI, formatting
  nlohmann-json3-dev                          # --stats JSON, speedscope
  libprotobuf-dev protobuf-compiler zlib1g-dev  # --format pprof: gzipped profile.proto; the agent's OTLP (proto/)
  golang-github-google-pprof-dev              # ... whose profile.proto is the one shipped here
  libcurl4-openssl-dev                        # beam-bpf-agent: pushes to Pyroscope
  libmicrohttpd-dev                           # beam-bpf-agent: its /metrics on localhost
  libre2-dev                                  # beam-bpf-agent: --match in linear time (RE2)
  libc6-dbg                                   # names libc's frames
  erlang-base python3                         # the demo: its VM (erl, erlc) and the agent's push receiver
)
# What only the tests (scripts/test.sh) and the bench (scripts/bench.sh) use.
test_packages=(
  libgtest-dev                                # unit and integration tests
  clang-format                                # tests: the C++ as .clang-format writes it (ctest -R Format)
  libclang-rt-14-dev                          # ASan, UBSan and libFuzzer runtimes (scripts/sanitize.sh)
  golang-go python3-protobuf                  # tests: go tool pprof and the proto read back
  chromium fonts-dejavu-core                  # tests: the HTML flame graph and speedscope rendered
  elixir                                      # tests: Elixir names from a real Elixir program
  erlang-dev strace                           # tests: the hostile fixture's NIF (erl_nif.h), what the tools open
  linux-perf                                  # the incumbent, for the tests' oracle and scripts/bench.sh
  debuginfod curl                             # tests: a stripped VM's debug file from a real debuginfod
  libcap2-bin                                 # capsh: the non-root capability tests
  yamllint                                    # packaging/check.py: the DaemonSet example
  rabbitmq-server python3-pika ejabberd       # real applications: bench/rabbitmq.py, tests/integration/apps_test.cpp
)
[ -n "$tests" ] && packages+=("${test_packages[@]}")
if [ -z "${BB_SKIP_APT:-}" ]; then
  missing=()
  for p in "${packages[@]}"; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  # npm fetches speedscope for the tests (tests/consumers/check_speedscope.py). Debian's npm
  # conflicts with NodeSource's nodejs, which has its own npm: install it only where none is.
  [ -z "$tests" ] || command -v npm >/dev/null || missing+=(npm)
  if [ ${#missing[@]} -gt 0 ]; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    # The tests start their own RabbitMQ and ejabberd (own ports, nodes, data): not the system's.
    [ -z "$tests" ] || systemctl disable --now rabbitmq-server ejabberd >/dev/null 2>&1 || true
  fi
fi

# CO-RE relocations need the running kernel's BTF.
[ -r /sys/kernel/btf/vmlinux ] || { echo "setup.sh: this kernel has no BTF (/sys/kernel/btf/vmlinux); beam-bpf needs CONFIG_DEBUG_INFO_BTF" >&2; exit 1; }

# The tools alone by default; with --tests, the tests too and warnings as errors (a build once
# configured so keeps it).
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release ${tests:+-DBB_TESTS=ON -DBB_WERROR=ON} >/dev/null
cmake --build build -j"$(nproc)"
