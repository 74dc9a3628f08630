#!/usr/bin/env python3
"""What profiling a VM costs the *other* processes on the machine: a busy neighbour's throughput
with beam-bpf-sample attached to a VM at 9,999 Hz, per-thread events (the default) against
--per-cpu, side by side in one run.

The neighbour is one single-threaded, CPU-bound process (`gzip -1` reading /dev/zero), timed by
the bytes it reads in a fixed wall time (/proc/PID/io); the VM runs one busy Erlang process (split532), so
both of the machine's CPUs are busy. Rounds rotate the order of the three configurations; the
figure is the median over rounds of each configuration's throughput relative to the same
round's unprofiled run. Run as root after scripts/setup.sh --tests:

    bench/neighbour.py [--rounds 5] [--seconds 5] [--build DIR] [--json FILE]
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

from lib import Bench, Vm, arg_parser, compile_workloads, require_root, write_json


def neighbour_throughput(seconds):
    """Bytes per second that one `gzip -1 </dev/zero` reads in `seconds` of wall time."""
    with open("/dev/zero", "rb") as zero, open(os.devnull, "wb") as null:
        p = subprocess.Popen(["gzip", "-1"], stdin=zero, stdout=null)
        def read_bytes():
            for line in open(f"/proc/{p.pid}/io"):
                if line.startswith("rchar:"):
                    return int(line.split()[1])
            return 0
        time.sleep(0.2)  # started and running
        b0, t0 = read_bytes(), time.monotonic()
        time.sleep(seconds)
        b1, t1 = read_bytes(), time.monotonic()
        p.kill()
        p.wait()
    return (b1 - b0) / (t1 - t0)


def run_config(bench, config, vm_pid, seconds):
    if config == "none":
        return neighbour_throughput(seconds)
    args = ["-F", "9999", "-d", str(seconds + 30), vm_pid]
    if config == "per-cpu":
        args.insert(0, "--per-cpu")
    tool = bench.start("beam-bpf-sample", args)
    try:
        return neighbour_throughput(seconds)
    finally:
        bench.stop(tool)


def main():
    ap = arg_parser(__doc__, "bench-neighbour.json")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5)
    a = ap.parse_args()
    require_root("neighbour.py")
    bench = Bench(a.build)
    with tempfile.TemporaryDirectory() as beams:
        compile_workloads(beams, ("bb_work",))
        with Vm(beams, "bb_work:main(split532)") as vm:
            configs = ["none", "per-thread", "per-cpu"]
            rel = {"per-thread": [], "per-cpu": []}
            raw = []
            for r in range(a.rounds):
                order = configs[r % 3:] + configs[:r % 3]
                got = {c: run_config(bench, c, str(vm.pid), a.seconds) for c in order}
                raw.append(got)
                for c in rel:
                    rel[c].append(got[c] / got["none"])
                print(f"round {r + 1}: " + ", ".join(f"{c} {got[c] / 1e6:.0f} MB/s" for c in configs), flush=True)
    result = {c: {"median_relative_throughput": statistics.median(v), "rounds": v} for c, v in rel.items()}
    result["raw_bytes_per_s"] = raw
    print("\nbusy neighbour's throughput with beam-bpf-sample -F 9999 on a VM (median over rounds, vs no profiler):")
    for c in rel:
        print(f"  {c:10s} {100 * (result[c]['median_relative_throughput'] - 1):+.1f}%")
    write_json(a.json, result)


if __name__ == "__main__":
    sys.exit(main())
