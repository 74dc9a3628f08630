#!/usr/bin/env python3
"""Section 2 of scripts/bench.sh: kernel time per sample against Erlang stack depth.

bb_work `deep N` (N = 10, 100, 1000, 10000, and 1000 again with --max-depth 1024) is sampled at 999 Hz
twice per VM: once with --stats (the tool times its handler: mean and log2 histogram) and once
without (what users run), both with the kernel's bpf_stats on: run_time_ns / run_cnt of the
perf-event program (every sample on every CPU, other processes' return early), and run_time_ns
divided by the VM's own samples (an upper bound: it includes those early returns).
"""
import contextlib
import json
import os
import subprocess
import time

from lib import log, summary, verdict

# Past --max-depth the walk scans on to the stack's bottom for the root-most frames: 1000 and
# 10000 show what that costs.
DEPTHS = (("10", 10, ()), ("100", 100, ()), ("1000", 1000, ()), ("10000", 10000, ()),
          ("1000x", 1000, ("--max-depth", "1024")))
BPF_STATS = "/proc/sys/kernel/bpf_stats_enabled"


@contextlib.contextmanager
def bpf_stats_on():
    saved = open(BPF_STATS).read()
    with open(BPF_STATS, "w") as f:
        f.write("1")
    try:
        yield
    finally:
        with open(BPF_STATS, "w") as f:
            f.write(saved)


def on_sample_prog(pid):
    """The id of the tool's perf-event program, from its own fds (bpftool here cannot show the
    programs' owner pids)."""
    for fd in sorted(os.listdir(f"/proc/{pid}/fd")):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:bpf-prog":
                info = dict(l.split(":", 1) for l in open(f"/proc/{pid}/fdinfo/{fd}") if ":" in l)
                if int(info["prog_type"]) == 7:  # BPF_PROG_TYPE_PERF_EVENT
                    return int(info["prog_id"])
    raise SystemExit(f"bench: cannot find the on_sample program of pid {pid}")


def prog_stats(prog):
    """(run_time_ns, run_cnt) of a BPF program."""
    j = json.loads(subprocess.run(["bpftool", "-j", "prog", "show", "id", str(prog)], capture_output=True,
                                  text=True, check=True).stdout)
    return j.get("run_time_ns", 0), j.get("run_cnt", 0)


def one_run(r, key, vm, extra, with_stats):
    R = r.R
    stats = os.path.join(r.tmp, key + ".json")
    tool = r.bench.start("beam-bpf-sample", ["-F", "999", *(["--stats", stats] if with_stats else []), *extra,
                                             "-o", os.devnull, str(vm.pid)])
    prog = on_sample_prog(tool.pid)
    time.sleep(r.depth_s)
    t, c = prog_stats(prog)
    records, dropped = summary(r.bench.stop(tool))  # right after the reading: the tool's totals cover ~the same samples
    R.update({f"{key}.bpf_stats_run_time_ns": t, f"{key}.bpf_stats_run_cnt": c, f"{key}.records": records,
              f"{key}.dropped": dropped, f"{key}.kernel_ns_per_run": t / (c or 1),
              f"{key}.kernel_ns_per_target_sample": t / ((records + dropped) or 1)})
    if with_stats:
        st = json.load(open(stats))
        R.update({f"{key}.bpf_walk_ns_mean": st["bpf_walk_ns_mean"], f"{key}.seen": st["seen"],
                  f"{key}.truncated": st["truncated"], f"{key}.hist": st["bpf_walk_ns_log2_hist"],
                  f"{key}.kernel_ns_per_target_sample": t / st["seen"]})
        r.stats_run(key, st)


def run(r):
    log(f"2. kernel time per sample: deep N = 10 100 1000 10000 (+ 1000 with --max-depth 1024), {r.depth_s}s each")
    with r.section("depth"), bpf_stats_on():
        for key, n, extra in DEPTHS:
            with r.vm(f"bb_work:main(deep, {n})") as vm:
                one_run(r, f"depth.{key}.stats", vm, extra, True)
                one_run(r, f"depth.{key}.plain", vm, extra, False)
                vm.quit(5)
            log(f"  N={key}: tool {r.R[f'depth.{key}.stats.bpf_walk_ns_mean']:.6g} ns/sample; bpf_stats "
                f"{r.R[f'depth.{key}.plain.kernel_ns_per_target_sample']:.6g} ns/target sample")


def hist_summary(h):
    """log2 histogram -> "p50<X p90<Y p99<Z ns; N% <2048 ns" (bucket b holds [2^b, 2^(b+1)))."""
    n = sum(h)
    if not n:
        return "-"
    p, c = {}, 0
    for b, count in enumerate(h):
        c += count
        for q in (50, 90, 99):
            if q not in p and c >= q / 100 * n:
                p[q] = 2 ** (b + 1)
    return f"p50<{p[50]} p90<{p[90]} p99<{p[99]} ns; {100 * sum(h[:11]) / n:.1f}% <2048 ns"


def report(r):
    R = r.R
    worst = max(R[f"depth.{n}.{k}"] for n in ("10", "100")
                for k in ("stats.bpf_walk_ns_mean", "plain.kernel_ns_per_target_sample"))
    R["depth.worst_ns_upto_100"] = worst
    R["verdict.kernel_2us"] = verdict(worst <= 2000)
    row = "   {:<12} {:<10} {:<44} {:<22} {:<22}"
    lines = [f"2. Kernel time per sample, bb_work deep N at 999 Hz, {r.depth_s} s each (others used "
             f"{R['depth.others_cpu_pct']:.1f}% of the CPUs)",
             "   tool: handler time per sample of the VM (--stats); bpf_stats: run_time_ns / run_cnt (every sample on "
             "every CPU, others' filtered early)",
             "   and run_time_ns / samples of the VM (an upper bound: it includes the filtered runs), in a run with "
             "--stats and one without",
             row.format("N", "tool mean", "tool histogram", "bpf_stats (--stats)", "bpf_stats (plain)")]
    for n, _, _ in DEPTHS:
        d = f"depth.{n}."
        lines.append(row.format(
            "1000 (1024)" if n == "1000x" else n, f"{R[d + 'stats.bpf_walk_ns_mean']:.0f} ns",
            hist_summary(R[d + "stats.hist"]),
            f"{R[d + 'stats.kernel_ns_per_run']:.0f} / {R[d + 'stats.kernel_ns_per_target_sample']:.0f} ns",
            f"{R[d + 'plain.kernel_ns_per_run']:.0f} / {R[d + 'plain.kernel_ns_per_target_sample']:.0f} ns"))
    lines.append(f"   (N=1000 and 10000 keep --max-depth 512 frames by default, the leaf-most and the 32 root-most, "
                 f"scanning the whole stack: truncated samples {R['depth.1000.stats.truncated']} and "
                 f"{R['depth.10000.stats.truncated']}; '1000 (1024)' keeps all of them)")
    targets = [("kernel time/sample, <=100 frames", f"{worst:.0f} ns (worst of tool mean and bpf_stats)", "<= 2000 ns",
                R["verdict.kernel_2us"])]
    return lines, targets


if __name__ == "__main__":
    import main
    main.main(sections="2")
