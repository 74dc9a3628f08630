#!/usr/bin/env python3
"""beam-bpf-sample -e wall: what it costs, against the VM's process count and on the VM's work.

Cost: for each process count (--processes, default 1000,100000,1000000) a VM with that many
idle processes (bench_work `idle`, +P twice the count), profiled for --seconds at -e wall's
defaults (20 ticks a second, 64 processes a tick). From the tool's --stats: its CPU (user +
system, a share of one CPU), the reads it made of the VM per second (process table bytes,
Process structs, stack words), the ticks it kept up (of 20 a second), its peak RSS; and the share
of process time it put in the holders' receive, against their share of the VM's processes.

Overhead: what -e wall costs the VM it profiles. Rounds as section 10's: a fresh VM running
bench_work's fixed CPU-bound work on every scheduler, warmed up, then the work timed once
without the tool and once while -e wall profiles it, in an order alternated from round to round;
the figure is the median over rounds of the same-VM ratio, with its quartiles. On a 2-core
machine the tool's own CPU competes with the VM's two schedulers: that is part of the cost.

    bench/wall.py [--parts cost,overhead] [--processes 1000,100000,1000000] [--seconds 10]
                  [--rounds 8] [--iters 6000000] [--json FILE]
"""
import json
import os
import statistics
import subprocess
import tempfile

from lib import ROOT, Bench, Vm, arg_parser, require_root, write_json


def cost(a, sample, beams):
    rows = []
    for n in (int(x) for x in a.processes.split(",")):
        vm = Vm(beams, f"bench_work:main(idle, {n})", flags=["+P", str(max(2 * n, 262144))], timeout=600)
        count = int(vm.ready_line.split()[1])
        try:
            with tempfile.TemporaryDirectory() as d:
                stats, folded = os.path.join(d, "stats.json"), os.path.join(d, "wall.folded")
                subprocess.run([sample, "-e", "wall", "-d", str(a.seconds), "-f", "folded", "-o", folded,
                                "--stats", stats, str(vm.pid)], check=True, capture_output=True)
                s = json.load(open(stats))
                holders = total = 0
                for line in open(folded):
                    stack, ns = line.rsplit(" ", 1)
                    total += int(ns)
                    holders += int(ns) if "bench_work:holder/1" in stack else 0
        finally:
            vm.quit()
        sec = s["seconds"]
        row = {"processes": count, "tool_cpu_pct": round(100 * s["tool_cpu_s"] / sec, 2),
               "ticks_per_s": round(s["ticks"] / sec, 1), "table_mb_per_s": round(s["slot_bytes"] / 1e6 / sec, 1),
               "process_reads_per_s": round(s["process_reads"] / sec), "stack_words_per_s": round(s["stack_words"] / sec),
               "processes_profiled": s["processes_profiled"], "peak_rss_mib": round(s["peak_rss_kib"] / 1024, 1),
               "holders_share_pct": round(100 * holders / total, 2), "holders_truth_pct": round(100 * n / count, 2)}
        rows.append(row)
        print(f"{count:>9} processes: tool CPU {row['tool_cpu_pct']:.1f}% of a core, {row['ticks_per_s']} ticks/s, "
              f"reads {row['table_mb_per_s']} MB/s of process table, {row['process_reads_per_s']} Process "
              f"structs/s, {row['stack_words_per_s']} stack words/s, peak RSS {row['peak_rss_mib']} MiB; holders "
              f"{row['holders_share_pct']}% of process time (they are {row['holders_truth_pct']}% of the processes)",
              flush=True)
    return rows


def overhead(a, sample, beams):
    runs = []  # (round, config, ns)
    for rnd in range(a.rounds):
        vm = Vm(beams, f"bench_work:main(overhead, {a.iters})")
        try:
            vm.send("warm")
            vm.expect("warm")
            for name in (("none", "wall") if rnd % 2 == 0 else ("wall", "none")):
                tool = None
                if name == "wall":
                    tool = subprocess.Popen([sample, "-e", "wall", "-f", "folded", "-o", "/dev/null", str(vm.pid)],
                                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                    for line in tool.stderr:  # attached: its first tick comes next
                        if "attached" in line:
                            break
                vm.send("go")
                ns = int(vm.expect("done").split()[1])
                if tool:
                    tool.send_signal(2)
                    tool.communicate(timeout=30)
                runs.append((rnd, name, ns))
                print(f"  round {rnd + 1} {name}: {ns / 1e9:.3f} s", flush=True)
        finally:
            vm.quit()
    base = {r: ns for r, c, ns in runs if c == "none"}
    v = sorted(ns / base[r] for r, c, ns in runs if c == "wall")
    k = (len(v) + 3) // 4
    result = {"rounds": a.rounds, "iters": a.iters, "runs": runs,
              "paired_overhead_pct": round(100 * (statistics.median(v) - 1), 2),
              "q1_pct": round(100 * (v[k - 1] - 1), 2), "q3_pct": round(100 * (v[len(v) - k] - 1), 2)}
    print(f"-e wall at its defaults: VM throughput overhead {result['paired_overhead_pct']:+.2f}% (same VM, median of "
          f"{len(v)} rounds; quartiles {result['q1_pct']:+.2f}% to {result['q3_pct']:+.2f}%)", flush=True)
    return result


def main():
    ap = arg_parser(__doc__, "bench-wall.json")
    ap.add_argument("--parts", default="cost,overhead")
    ap.add_argument("--processes", default="1000,100000,1000000")
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--iters", type=int, default=6000000)
    a = ap.parse_args()
    require_root("wall.py")
    sample = Bench(a.build).tool("beam-bpf-sample")
    result = {}
    with tempfile.TemporaryDirectory() as beams:
        subprocess.run(["erlc", "-o", beams, os.path.join(ROOT, "bench", "bench_work.erl")], check=True)
        if "cost" in a.parts:
            result["cost"] = cost(a, sample, beams)
        if "overhead" in a.parts:
            result["overhead"] = overhead(a, sample, beams)
    write_json(a.json, result)


if __name__ == "__main__":
    main()
