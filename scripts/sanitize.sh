#!/usr/bin/env bash
# The sanitizer and fuzzing pass of the tests (scripts/test.sh runs it after the main suite):
#  1. builds the tools, the unit tests and the fuzz targets with clang, AddressSanitizer and
#     UndefinedBehaviorSanitizer into build-san/, and runs the unit tests, and the main build's
#     integration tests on those tools (BB_TOOLS_DIR: the harness itself is not what the
#     sanitizers watch), on Debian's OTP 25 and those
#     that are not per VM (release, container and error tests, which use OTP 27 too): the same
#     BPF walker runs on every VM, and what ASan and UBSan watch is the user space that reads
#     the VM and the kernel's records;
#  2. runs each libFuzzer target (tests/fuzz) for FUZZ_SECONDS (default 20) from its committed
#     seed corpus (tests/fuzz/corpus/TARGET). A crash fails the run and leaves the input in
#     build-san/fuzz-artifacts/: add it to the corpus and a unit test once fixed.
# Run as root after scripts/setup.sh --tests (and the test VMs: scripts/test.sh builds them).
#   scripts/sanitize.sh           both steps
#   scripts/sanitize.sh --build   the build alone (scripts/test.sh runs it beside the main suite,
#                                 at idle priority), then `scripts/sanitize.sh --run` the rest
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-20}
mode=${1:-}

if [ "$mode" != --run ]; then
  # -O1 and line tables only: what the sanitizers' reports need (their documentation's advice),
  # and a fifth less of the build than -O2 -g (340 s against 437 s from nothing, 2 CPUs).
  CC=clang CXX=clang++ cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Sanitize "-DCMAKE_CXX_FLAGS_SANITIZE=-O1 -gline-tables-only" \
    "-DCMAKE_C_FLAGS_SANITIZE=-O1 -gline-tables-only" -DBB_SANITIZE=ON -DBB_FUZZ=ON -DBB_TESTS=ON >/dev/null
  cmake --build build-san -j"$(nproc)"
fi
[ "$mode" != --build ] || exit 0

export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
build-san/unit_tests
# On Debian's OTP 25, and the stripped OTP 29's memory search (target/vm_globals.cpp) with what uses it.
# Left out, to keep CI's time: slow tests whose code paths others here run (the same user space
# reads the same records and memory; what these add is statistics over longer runs):
#  - the stale dirty scheduler's (--pstack: SampleVmTest.Pstack), blame's ranking and stale slots
#    (BlameTest, BlameVmTest.CountMatchesVmGcTrace), blame with three capabilities (the sample's);
#  - the allocation sweeps and epochs (AllocVmTest, AllocShortLivedTest), shares and deep
#    recursion (SampleVmTest.DeepRecursion, SampleReleaseTest), zlib's leaf shares (the other
#    NativeVmTest cases), the off-CPU totals (the other OffcpuVmTest cases);
#  - the abandoned heap's --inspect (InspectOfARunningProcess): under the sanitizers the copy is
#    slow enough that the process runs during every one, and the case is never caught;
#  - second runs of a path with other statistics: the wall shares (the other WallVmTest cases),
#    isolation from other processes and threads (BPF's filter), --by-process against the trace
#    (ByProcessGroupsByName), short-lived allocators (AllocVmTest, AllocMixTest.RandomRatios),
#    run-queue lock names and the idle VM (the contended ETS table), two profilers at once, a
#    never-called blame target, Chromium's speedscope (the speedscope writer's unit tests).
san_filter='SampleTest.*:BlameTest.*:ReportTest.*:ReleaseTest.*:JitCodeLive.*:NativeSymbolsLive.*:*/otp25:Vms/LiveLayoutTest.*/otp29:Vms/JitCodeVmTest.*/otp29:Vms/ProcsVmTest.AgreesWithProcessInfo/otp29:Vms/SampleVmTest.Pstack/otp29:DebugFileTest.*-*.StaleDirtySchedulerNotAttributed/*:*.PeriodicWorkSweep/*:*.BlameRanksAllocatorFirst/*:*.BlameHasNoStaleSlotFalsePositives/*:*.BlameWithOnlyThreeCapabilities/*:*.ProcessesOfUnequalEpochsWithoutProcess/*:*.SessionsAndReturnProbesAgreeAtALongerPeriod/*:*.Split532Shares/*:*.DeepRecursionTruncated/*:*.DeepRecursionFoldsAndKeepsItsCallers/*:*.ZlibLeafSharesAgreeWithPerf/*:*.PerThreadTotalsAgreeWithTheKernel/*:*.InspectOfAnAbandonedHeap/*:*.SharesAgreeWithTheVmsOwnSampler/*:*.NoSamplesFromOtherProcesses/*:*.PerThreadEventsOnlyRunForTheVm/*:*.ByProcessMatchesTheVmsTrace/*:*.ShortLivedProcessesAreAttributed/*:*.RunQueueLocksAreNamedByTheirScheduler/*:*.AnIdleVmIsIdle/*:SampleTest.TwoProfilersAtOnce:BlameTest.NeverCalledFunctionReportsZero:ReportTest.HtmlAndSpeedscopeInChromium'
# tests_named FILTER: the integration tests a gtest filter selects, a full name a line.
tests_named() {
  build/integration_tests --gtest_list_tests --gtest_filter="$1" | awk '/^[^ ]/ { suite = $1; next } /^  / { print suite $1 }' | LC_ALL=C sort
}
# Those of the main suite's shared ones (build/shared-tests.filter, CMakeLists.txt: exact checks,
# no floor of samples or time) run two at a time, as there, each half in a gtest process of its
# own; the others one at a time after them.
export BB_TOOLS_DIR="$PWD/build-san"
all=$(tests_named "$san_filter")
shared=$(LC_ALL=C comm -12 <(echo "$all") <(tests_named "$(cat build/shared-tests.filter)") | paste -sd:)
alone=$(LC_ALL=C comm -23 <(echo "$all") <(echo "$shared" | tr : '\n') | paste -sd:)
echo "sanitize.sh: $(echo "$all" | wc -l) integration tests on the sanitized tools, those of the shared label two at a time"
[ -n "$shared" ] && [ -n "$alone" ] || { echo "sanitize.sh: no tests in one of the two parts" >&2; exit 1; }
pids=()
for shard in 0 1; do
  GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$shard build/integration_tests --gtest_filter="$shared" \
    >build-san/shared-$shard.log 2>&1 &
  pids+=($!)
done
rc=0
for shard in 0 1; do
  wait "${pids[$shard]}" || rc=1
  cat build-san/shared-$shard.log
done
[ "$rc" = 0 ] || { echo "sanitize.sh: a shared test failed on the sanitized tools" >&2; exit 1; }
build/integration_tests --gtest_filter="$alone"

mkdir -p build-san/fuzz-artifacts
# fuzz TARGET: runs one target for $seconds; its summary lines go to build-san/fuzz-TARGET.log.
fuzz() {
  local target=$1 corpus
  corpus=$(mktemp -d)  # the committed seeds stay as they are; what the run finds is thrown away
  build-san/fuzz_"$target" -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 \
    -artifact_prefix=build-san/fuzz-artifacts/"$target"- "$corpus" tests/fuzz/corpus/"$target" 2>&1 \
    | grep -E '^(stat::number_of_executed_units|stat::new_units_added|==[0-9]+==ERROR|SUMMARY)|Done [0-9]+ runs' \
    > build-san/fuzz-"$target".log || true
  rm -rf "$corpus"
}
# A target runs on one CPU: as many at once as there are CPUs, each for the whole $seconds.
targets=(jit_symfile offsets_table vm_build elf terms unwind discovery process_lists)
for ((i = 0; i < ${#targets[@]}; i += $(nproc))); do
  batch=("${targets[@]:i:$(nproc)}")
  echo "sanitize.sh: fuzzing ${batch[*]} at once, ${seconds}s each"
  for target in "${batch[@]}"; do fuzz "$target" & done
  wait
  for target in "${batch[@]}"; do
    sed "s/^/  $target: /" build-san/fuzz-"$target".log
    if compgen -G "build-san/fuzz-artifacts/$target-*" >/dev/null; then
      echo "sanitize.sh: fuzz_$target found a crash: $(ls build-san/fuzz-artifacts/"$target"-*)" >&2
      exit 1
    fi
  done
done
echo "sanitize.sh: sanitized tests and fuzzing passed"
