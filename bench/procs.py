#!/usr/bin/env python3
"""beam-bpf-procs on a VM with many processes: how long a snapshot of the whole process table
takes and the tool's peak RSS (targets: under 2 s and 256 MiB for 200,000 processes), while a
churner spawns and ends ~2,000 processes a second (they must be skipped, never fatal). Next to
it, in the same run, the in-VM way of getting the same table: process_info/2 of every process,
timed inside the VM. And each process's memory as the tool reads it against the VM's own
process_info(P, memory) read right after (a last run with --all): the share of processes within
5% of it (the holders are idle; the churner's short-lived ones are compared when both saw them).

Each run is `beam-bpf-procs --json -t 20 PID` (the whole table is read and sorted; 20 rows are
named and printed). Wall time is measured around the tool's process, RSS from its rusage. Run as
root after scripts/setup.sh --tests:

    bench/procs.py [--processes 200000] [--runs 5] [--json FILE]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from lib import ROOT, Bench, Vm, arg_parser, require_root, write_json


def run_tool(procs, vm_pid):
    """One snapshot: (exit status, stdout, stderr, wall seconds, peak RSS in KiB of the tool)."""
    with tempfile.TemporaryFile(mode="w+") as out, tempfile.TemporaryFile(mode="w+") as err:
        t0 = time.monotonic()
        p = subprocess.Popen([procs, "--json", "-t", "20", str(vm_pid)], stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)  # the tool's own rusage, not the VM's or erlc's
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return p.returncode, out.read(), err.read(), wall, usage.ru_maxrss


def compare_memory(procs, vm):
    """The tool's memory of every process (--all) against the VM's process_info(P, memory), read
    by the VM right after."""
    with tempfile.TemporaryDirectory() as d:
        out = subprocess.run([procs, "--json", "--all", str(vm.pid)], capture_output=True, text=True, check=True)
        tool = {p["pid"]: p["memory"] for p in json.loads(out.stdout)["processes"]}
        path = os.path.join(d, "memory.txt")
        vm.p.stdin.write(f"memory {path}\n")
        vm.p.stdin.flush()
        while not vm.p.stdout.readline().startswith("memory"):
            pass
        theirs = dict((pid, int(b)) for pid, b in (l.split() for l in open(path)))
    both = [(tool[p], theirs[p]) for p in tool if p in theirs]
    dev = [100.0 * (t - v) / v for t, v in both]
    return {"compared": len(both), "within_5pct": sum(abs(x) <= 5 for x in dev),
            "exact": sum(t == v for t, v in both), "worst_pct": max(dev, key=abs) if dev else 0.0}


def main():
    ap = arg_parser(__doc__, "bench-procs.json")
    ap.add_argument("--processes", type=int, default=200000)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    require_root("procs.py")
    procs = Bench(a.build).tool("beam-bpf-procs")
    with tempfile.TemporaryDirectory() as beams:
        subprocess.run(["erlc", "-o", beams, os.path.join(ROOT, "bench", "bench_work.erl")], check=True)
        vm = Vm(beams, f"bench_work:main(procs, {a.processes})", flags=["+P", str(max(2 * a.processes, 262144))])
        count = int(vm.ready_line.split()[1])
        try:
            runs = []
            for i in range(a.runs):
                code, out, err, wall, rss_kib = run_tool(procs, vm.pid)
                if code != 0:
                    raise SystemExit(f"procs.py: beam-bpf-procs failed: {err.strip()}")
                j = json.loads(out)
                runs.append({"wall_s": wall, "read_ms": j["read_ms"], "processes": j["processes_total"],
                             "unreadable": j["unreadable"], "rss_kib": rss_kib})
                vm.p.stdin.write("info\n")
                vm.p.stdin.flush()
                line = vm.p.stdout.readline().split()
                runs[-1]["in_vm_process_info_ms"] = float(line[1])
                print(f"run {i + 1}: {wall:.2f} s wall, table read in {j['read_ms']:.0f} ms, "
                      f"{j['processes_total']} processes, {j['unreadable']} unreadable; "
                      f"in the VM, process_info/2 of all took {line[1]} ms", flush=True)
            memory = compare_memory(procs, vm)
        finally:
            vm.p.stdin.write("quit\n")
            vm.p.stdin.flush()
            vm.p.wait(timeout=30)
    result = {
        "processes_in_vm": count,
        "runs": runs,
        "wall_s_median": statistics.median(r["wall_s"] for r in runs),
        "wall_s_max": max(r["wall_s"] for r in runs),
        "read_ms_median": statistics.median(r["read_ms"] for r in runs),
        "peak_rss_mib": max(r["rss_kib"] for r in runs) / 1024,
        "unreadable_max": max(r["unreadable"] for r in runs),
        "in_vm_process_info_ms_median": statistics.median(r["in_vm_process_info_ms"] for r in runs),
        "memory_vs_process_info": memory,
        "targets": {"wall_s": 2.0, "rss_mib": 256},
    }
    print(f"beam-bpf-procs on {count} processes: snapshot {result['wall_s_median']:.2f} s median "
          f"(max {result['wall_s_max']:.2f}; target < 2 s), table read {result['read_ms_median']:.0f} ms, "
          f"peak RSS {result['peak_rss_mib']:.1f} MiB (target < 256); in the VM, process_info/2 of every "
          f"process: {result['in_vm_process_info_ms_median']:.0f} ms of the VM's own time")
    print(f"memory against process_info(P, memory): {memory['within_5pct']} of {memory['compared']} processes "
          f"within 5% ({memory['exact']} exact), worst {memory['worst_pct']:+.2f}%")
    write_json(a.json, result)


if __name__ == "__main__":
    main()
