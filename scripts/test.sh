#!/usr/bin/env bash
# Sets up (packages + build) and runs every test: unit tests, and integration tests that load
# the BPF program into this kernel and profile real Erlang VMs. Run as root.
#
#   scripts/test.sh            everything CI runs (.ci/run); docs/testing.md keeps its times
#   scripts/test.sh --quick    for iterating: the unit tests and one short profile on each release
#                              (a few minutes once the test VMs are built); not what CI runs
#   scripts/test.sh -- ARGS    ARGS passed to ctest (e.g. -- -R Procs)
# Each stage prints its duration, and the last lines sum them up.
set -euo pipefail
cd "$(dirname "$0")/.."
quick=
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
[ "${1:-}" = -- ] && shift

timings=()
# stage NAME COMMAND...: runs it and notes how long it took.
stage() {
  local name=$1 t0=$SECONDS
  shift
  "$@"
  timings+=("$(printf '%-34s %5d s' "$name" $((SECONDS - t0)))")
  echo "test.sh: $name: $((SECONDS - t0)) s"
}
san_pid=
finish() {
  # The build's whole process group (and woken, should it be stopped, to take the signal).
  [ -z "$san_pid" ] || { kill -- -"$san_pid"; kill -CONT -- -"$san_pid"; } 2>/dev/null || true
  echo "test.sh: stage times (total $((SECONDS / 60)) min $((SECONDS % 60)) s):"
  printf '  %s\n' "${timings[@]}"
}
trap finish EXIT

stage "packages and build" scripts/setup.sh --tests
# The test VMs, cached in /var/tmp (each a build of minutes the first time):
#  - a beam.smp with DWARF, built from the Debian source of the installed VM: the offsets test
#    checks the shipped table against it (scripts/build-debug-vm.sh);
#  - OTP 27 and OTP 29, built as kerl/asdf users build theirs: the test matrix
#    (tests/integration/harness.hpp) runs on them too (scripts/build-test-vms.sh).
# All three at once: each leaves a CPU idle for part of its time (configure, links, the Erlang
# applications' serial steps), which the others' compiles then fill. Each one's log and time
# go to build/vm-NAME.log.
test_vms() {
  local name pids=() names=(otp25-debug otp27 otp29) rc=0 i
  for name in "${names[@]}"; do
    (
      t0=$SECONDS
      case $name in otp25-debug) scripts/build-debug-vm.sh ;; otp27) scripts/build-test-vms.sh 27 ;; *) scripts/build-test-vms.sh 29 ;; esac
      echo "test.sh: $name built in $((SECONDS - t0)) s"
    ) >"build/vm-$name.log" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    if wait "${pids[$i]}"; then tail -n 1 "build/vm-${names[$i]}.log"
    else rc=1; tail -n 30 "build/vm-${names[$i]}.log" >&2; echo "test.sh: the ${names[$i]} VM failed to build" >&2; fi
  done
  return $rc
}
stage "test VMs (OTP 25 debug, 27, 29)" test_vms

run_ctest() { (cd build && ctest --output-on-failure --timeout 600 "$@"); }
if [ -n "$quick" ]; then
  stage "unit tests" run_ctest -j2 -L unit "$@"
  stage "a profile on each release" run_ctest -j2 -R '^Vms/SampleReleaseTest\.NoSamplesFromOtherProcesses/' "$@"
  exit 0
fi

# The sanitizer build (scripts/sanitize.sh) goes on beside the tests that share the CPUs, at
# idle priority (SCHED_IDLE: only on a CPU that nothing else wants), and is stopped (SIGSTOP)
# while those that measure run: they run with nothing beside them.
if [ -z "${BB_SKIP_SANITIZE:-}" ]; then
  setsid chrt --idle 0 scripts/sanitize.sh --build >build/sanitize-build.log 2>&1 &
  san_pid=$!
fi
# Tests that check what is exact (the VM's own view, an error line, a file) run two at a time
# on two CPUs; those that measure one at a time, alone (CMakeLists.txt: BB_SHARED_TESTS).
stage "ctest: unit and shared, 2 at a time" run_ctest -j2 -L 'unit|shared' "$@"
[ -z "$san_pid" ] || kill -STOP -- -"$san_pid" 2>/dev/null || true
stage "ctest: exclusive, 1 at a time" run_ctest -L exclusive "$@"
[ -z "$san_pid" ] || kill -CONT -- -"$san_pid" 2>/dev/null || true
# The agent's systemd unit and Kubernetes DaemonSet example: linted, and every option and setting
# they pass checked by the built agent (no cluster here).
stage "packaging check" packaging/check.py build
[ -n "$san_pid" ] || exit 0
# The same tests under AddressSanitizer and UndefinedBehaviorSanitizer, and the fuzz targets
# (BB_SKIP_SANITIZE=1 skips this pass when iterating locally).
wait_san_build() {
  local rc=0
  wait "$san_pid" || rc=$?
  san_pid=
  [ "$rc" = 0 ] || { tail -n 40 build/sanitize-build.log >&2; echo "test.sh: the sanitizer build failed" >&2; return 1; }
}
stage "sanitizer build (what was left)" wait_san_build
stage "sanitized tests and fuzzing" scripts/sanitize.sh --run
