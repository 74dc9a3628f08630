#!/usr/bin/env python3
"""What `beam-bpf-sample -e alloc` costs a GC-heavy workload, side by side with OTP 27's tprof
call_memory tracing on the same work, and how its estimator is biased when allocations differ in
size.

Overhead: bb_alloc's `time N` (tests/workloads/bb_alloc.erl) runs N rounds of building and
dropping 100-cell lists (a collection about every microsecond: the worst case), and
`time_mixed N` N rounds of its 3:1:0 work (a collection every ~40 iterations of arithmetic), each
timed inside the VM; configurations
(no tool, beam-bpf-sample -e alloc attached to the VM, and on OTP 27 tprof call_memory) are
interleaved over rounds, each round's times relative to the same round's untraced one, medians
reported. Bias: bb_alloc's `bias N` allocates 200 words per round in 100 cons cells built by
Erlang code and 200 in one tuple made by a BIF (erlang:make_tuple/2), 50/50 by construction; the
tool's self shares are printed against that.

Run as root after scripts/setup.sh (and scripts/build-test-vms.sh for the OTP 27 part):

    bench/alloc.py [--rounds 5] [--work 20000] [--json FILE]
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "build", "beam-bpf-sample")
OTP27 = "/var/tmp/beam-bpf-otp27/prefix/bin"


class Vm:
    def __init__(self, bindir, beams):
        erl = os.path.join(bindir, "erl") if bindir else "erl"
        self.p = subprocess.Popen([erl, "-noshell", "-pa", beams, "-eval", "bb_alloc:main()"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.worker = self.wait("ready").split()[1]

    def wait(self, prefix):
        for line in self.p.stdout:
            if line.startswith(prefix):
                return line
        raise SystemExit(f"alloc.py: the VM ended before `{prefix}`")

    def cmd(self, line, reply):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()
        return self.wait(reply)

    def close(self):
        self.p.stdin.write("quit\n")
        self.p.stdin.flush()
        self.p.wait(timeout=30)


def attach(vm, args):
    t = subprocess.Popen([SAMPLE, "-e", "alloc", *args, str(vm.p.pid)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    for line in t.stderr:
        if ": attached to " in line:
            return t
    raise SystemExit(f"alloc.py: beam-bpf-sample did not attach: {t.communicate()}")


def detach(t):
    t.send_signal(2)
    out, err = t.communicate(timeout=60)
    return out


def overhead(vm, rounds, work, with_tprof, kind="time"):
    configs = ["none", "alloc"] + (["tprof"] if with_tprof and kind == "time" else [])
    ratios = collections.defaultdict(list)
    times = collections.defaultdict(list)
    vm.cmd(f"{kind} {work // 10}", "time")  # warm-up
    for r in range(rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        t = {}
        for c in order:
            if c == "alloc":
                tool = attach(vm, ["-o", os.devnull])
                t[c] = int(vm.cmd(f"{kind} {work}", "time").split()[1])
                detach(tool)
            elif c == "tprof":
                t[c] = int(vm.cmd(f"tprof_time {work}", "time").split()[1])
            else:
                t[c] = int(vm.cmd(f"{kind} {work}", "time").split()[1])
        for c in configs:
            times[c].append(t[c])
            ratios[c].append(t[c] / t["none"])
        print(f"round {r + 1}: " + ", ".join(f"{c} {t[c] / 1000:.0f} ms" for c in configs), flush=True)
    return {c: {"median_ms": statistics.median(times[c]) / 1000,
                "median_ratio": statistics.median(ratios[c])} for c in configs}


def bias(vm, rounds):
    tool = attach(vm, ["--process", vm.worker, "--folded"])
    vm.cmd(f"bias {rounds}", "bias_done")
    out = detach(tool)
    self = collections.Counter()
    for line in out.splitlines():
        stack, _, n = line.rpartition(" ")
        self[stack.split(";")[-1]] += int(n)
    total = sum(self.values()) or 1
    return {f: 100.0 * self[f] / total for f in ("bb_alloc:alloc_small/2", "bb_alloc:alloc_big/1")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", type=int, default=20000, help="gc_heavy rounds per timing")
    ap.add_argument("--json", default="bench-alloc.json")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory of the tools")
    a = ap.parse_args()
    global SAMPLE
    SAMPLE = os.path.join(a.build, "beam-bpf-sample")
    if os.geteuid() != 0:
        raise SystemExit("alloc.py: run as root")
    result = {}
    releases = [("otp25", "")] + ([("otp27", OTP27)] if os.path.exists(os.path.join(OTP27, "erl")) else [])
    for name, bindir in releases:
        with tempfile.TemporaryDirectory() as beams:
            erlc = os.path.join(bindir, "erlc") if bindir else "erlc"
            subprocess.run([erlc, "-o", beams, os.path.join(ROOT, "tests", "workloads", "bb_alloc.erl")], check=True)
            vm = Vm(bindir, beams)
            try:
                print(f"== {name}: overhead on a GC-heavy loop", flush=True)
                ov = overhead(vm, a.rounds, a.work, with_tprof=name == "otp27")
                print(f"== {name}: overhead on ordinary work (a collection every ~40 iterations of arithmetic)",
                      flush=True)
                mixed = overhead(vm, a.rounds, a.work // 200, False, kind="time_mixed")
                print(f"== {name}: estimator bias, 200 words in small cells vs 200 in one tuple (50/50)", flush=True)
                b = bias(vm, 5000)
            finally:
                vm.close()
        result[name] = {"overhead": ov, "overhead_mixed": mixed, "bias_shares": b}
        print(f"{name}: -e alloc slows ordinary work by {100 * (mixed['alloc']['median_ratio'] - 1):+.1f}%, "
              f"the GC-heavy loop by {100 * (ov['alloc']['median_ratio'] - 1):+.1f}%"
              + (f", tprof call_memory by {100 * (ov['tprof']['median_ratio'] - 1):+.1f}%" if "tprof" in ov else "")
              + "; shares for a 50/50 split: " + ", ".join(f"{f} {v:.1f}%" for f, v in b.items()), flush=True)
    if len(releases) == 1:
        print("alloc.py: no OTP 27 test VM (scripts/build-test-vms.sh): tprof not compared", flush=True)
    with open(a.json, "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
