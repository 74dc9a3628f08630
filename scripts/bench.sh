#!/usr/bin/env bash
# beam-bpf's performance figures, measured on this machine in one run, each next to its target:
#   1. VM throughput overhead: fixed CPU-bound Erlang work on every scheduler, timed inside the
#      VM, with no profiler / beam-bpf-sample at 999 and 9,999 Hz / `erl +JPperf true` alone /
#      `perf record -g` at 999 and 9,999 Hz on a +JPperf true VM, and 9,999 Hz sampling that
#      drops every sample (the interrupts' own cost); configurations interleaved.
#   2. Kernel time per sample against Erlang stack depth (bb_work `deep`, N = 10, 100, 1000):
#      the tool's own --stats (handler time, log2 histogram) and the kernel's bpf_stats.
#   3. Lost records: -F 9999 for 30 s on a VM busy on every CPU.
#   4. User space: records symbolized and aggregated per second on one core
#      (beam-bpf-userspace-bench), VMs with ~100 and ~2,000 loaded modules.
#   5. Start-up (launch to first record) and peak RSS of the tool, from every --stats run of 2-4.
#   6. A busy neighbour process's throughput while a VM is profiled at 9,999 Hz, per-thread
#      events against --per-cpu (bench/neighbour.py; not with --quick).
#   7. beam-bpf-procs on a VM with 200,000 processes: snapshot wall time and the tool's peak RSS,
#      next to the VM's own process_info/2 of every process (bench/procs.py).
#   8. beam-bpf-sample -e alloc: its cost on a GC-heavy loop and on ordinary work, next to -e
#      alloc-gc and OTP 27's tprof call_memory; take/give shares over a sweep of sizes, against
#      the sampling interval, and on BIF allocations (bench/alloc.py).
#   9. Native frames: BPF time per native frame unwound, per sample with and without them, the
#      unwind tables' size and start-up (bench/native.py).
#  10. beam-bpf-agent with 1, 5 and 20 VMs: its CPU, RSS and the kernel memory of its BPF objects,
#      per added VM; and the throughput cost to a VM it follows at its default 99 Hz and at 999 Hz,
#      same-VM ratios over rotated rounds (bench/agent.py).
#  11. beam-bpf-sample -e wall: the tool's CPU, its reads of the VM per second (process table,
#      Process structs, stack words) and its ticks kept, on VMs of 1,000, 100,000 and 1,000,000
#      idle processes; and the throughput cost to a VM it profiles, same-VM ratios over
#      alternated rounds (bench/wall.py).
#  12. beam-bpf-sample -e offcpu on a VM whose schedulers block and wake ~46,000 times a second:
#      its BPF programs' runs and ns a run (kernel.bpf_stats_enabled), and the throughput cost,
#      same-VM ratios over alternated rounds (bench/offcpu.py).
#  13. The first second on a busy node (100,000 atoms, both CPUs busy; the stripped OTP 29;
#      RabbitMQ under load): beam-bpf-sample's start to its attach line and to its first sample,
#      its own CPU, and each step of attaching (bench/attach.py).
#   On demand only, --soak [SECONDS] (default 3600) runs bench/soak.py and nothing else: the tool
#   on a busy VM reloading a module once a second, at 999 Hz, checked for flat RSS (5%),
#   zero drops and stable top-function shares. --agent-soak [SECONDS] (default 3600) runs
#   bench/agent_soak.py and nothing else: beam-bpf-agent while VMs of two builds start every 4 s
#   and end (halted or killed), 3 at a time, checked for flat RSS and BPF memory (10%) and no
#   descriptor, BPF object or perf event left behind.
# This script runs bench/main.py: the options, the wait for a quiet machine, sections 1 to 5
# (bench/overhead.py, depth.py, lost.py, userspace.py, startup.py), which print a table and
# write FILE (bench-results.json) and bench-results-overhead-runs.tsv (the raw overhead runs),
# then sections 6 to 12 (bench/neighbour.py, procs.py, alloc.py, native.py, agent.py, wall.py, offcpu.py), which write
# bench-results-neighbour.json and so on.
# Run as root after scripts/setup.sh --tests (which builds ./build).
#
#   scripts/bench.sh [--quick] [--json FILE] [--runs N] [--iters N] [--sections 1,2,...,12] [--soak [S]] [--agent-soak [S]]
#                    [--build DIR] [--max-load L] [--max-others PCT] [--load-wait S]
# It waits for a quiet machine first (load average <= L, others' CPU use <= PCT%, at most S
# seconds), and runs an overhead round again when other processes used more than PCT% of the
# CPUs during it.
set -eu
cd "$(dirname "$0")/.."
exec python3 bench/main.py "$@"
