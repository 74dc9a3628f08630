#!/usr/bin/env python3
"""What `beam-bpf-sample -e alloc` (hardware watchpoints) costs and how right it is, next to
`-e alloc-gc` (the stack at each collection: today's cost, biased on periodic code) and OTP 27's
tprof call_memory tracing, in one run.

Cost: bb_alloc's `time N` (tests/workloads/bb_alloc.erl) runs N rounds of building and dropping
100-cell lists (a collection about every microsecond: the worst case), and `time_mixed N` N
rounds of its 3:1:0 work (ordinary: a collection every ~40 iterations of arithmetic), each timed
inside the VM. The configurations (no tool, -e alloc at the default interval, the same with an
entry and a return probe per GC entry point instead of uprobe sessions (alloc-pair), -e alloc-gc,
and on OTP 27 tprof call_memory) are interleaved over rounds, each round's times relative to the same
round's untraced one; medians reported.

Right answers (bb_alloc_mix, tests/workloads/bb_alloc_mix.erl, truth by construction):
  - the sweep: take(T)/give(G)/idle over ten size pairs and depths, 75% / 25% / 0 whatever the
    phase at which the heap fills, by -e alloc and by -e alloc-gc;
  - the bias against the sampling interval: take(300)/give(100) and take(3000)/give(1000) at
    --period 256, 4,096 and 65,536 (the default) words;
  - BIF allocations: bb_alloc's `bias 20000`, 200 words in 100 cells built by Erlang code and 200 in
    one tuple made by a BIF (erlang:make_tuple/2), 50/50.

Run as root after scripts/setup.sh --tests (and scripts/build-test-vms.sh for the OTP 27 part):

    bench/alloc.py [--rounds 5] [--work 20000] [--seconds 2] [--parts cost,bif,sweep,interval]
                   [--build DIR] [--json FILE]
"""
import collections
import json
import os
import statistics
import tempfile

from lib import Bench, Vm, arg_parser, compile_workloads, log, require_root, write_json, end_started

OTP27 = "/var/tmp/beam-bpf-otp27/prefix/bin"

# The sweep's pairs: (take cells, give cells, depth). The first ten are the and the
# docs/validation.md's table (alloc-gc read 75.0, 75.0, 100.0, 80.9, 100.0, 75.0, 100.0, 100.0, 100.0, 75.0).
SWEEP = [(3000, 1000, 0), (3001, 1000, 0), (2400, 800, 0), (6000, 2000, 0), (300, 100, 0), (1200, 400, 0),
         (9000, 3000, 0), (2400, 800, 8), (300, 100, 20), (3000, 1000, 40)]
INTERVALS = [256, 4096, 65536]


def self_shares(folded, names):
    """Per leaf function, its share of the folded stacks' weight, in percent."""
    self = collections.Counter()
    for line in folded.splitlines():
        stack, _, n = line.rpartition(" ")
        if n.isdigit():
            self[stack.split(";")[-1]] += int(n)
    total = sum(self.values()) or 1
    return {f: 100.0 * self[f] / total for f in names}


class Sampler:
    """beam-bpf-sample -e EVENT on one VM, its folded output and --stats read at the end."""

    def __init__(self, bench, vm_pid, event, args=(), env=None):
        self.stats = tempfile.NamedTemporaryFile(suffix=".json")
        self.out = tempfile.TemporaryFile(mode="w+")
        # The bench's own VMs: watchpoints are allowed in a virtual machine (docs/allocation-profiling.md).
        vm_ok = ["--watchpoints-in-vm"] if event == "alloc" else []
        self.p = bench.start("beam-bpf-sample", ["-e", event, *vm_ok, *args, "--folded", "--stats", self.stats.name,
                                                 str(vm_pid)], stdout=self.out, env=env)

    def stop(self):
        Bench.stop(self.p)
        self.out.seek(0)
        folded = self.out.read()
        stats = json.load(open(self.stats.name))
        self.stats.close()
        return folded, stats


def overhead(bench, vm, rounds, work, configs, kind):
    ratios, times = collections.defaultdict(list), collections.defaultdict(list)
    vm.send(f"{kind} {work // 10}")  # warm-up
    vm.expect("time")
    for r in range(rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        t = {}
        for c in order:
            # alloc-pair: -e alloc as before uprobe sessions, an entry and a return probe per
            # GC entry point (BB_NO_UPROBE_SESSION, sampling/walker.cpp).
            tool = (Sampler(bench, vm.pid, "alloc", env={"BB_NO_UPROBE_SESSION": "1"}) if c == "alloc-pair"
                    else Sampler(bench, vm.pid, c) if c.startswith("alloc") else None)
            vm.send(f"tprof_time {work}" if c == "tprof" else f"{kind} {work}")
            t[c] = int(vm.expect("time").split()[1])
            if tool:
                tool.stop()
        for c in configs:
            times[c].append(t[c])
            ratios[c].append(t[c] / t["none"])
        log(f"round {r + 1}: " + ", ".join(f"{c} {t[c] / 1000:.0f} ms" for c in configs))
    return {c: {"median_ms": statistics.median(times[c]) / 1000, "median_ratio": statistics.median(ratios[c])}
            for c in configs}


def mix(bench, vm, spawn, ms, event, period=None):
    """One bb_alloc_mix worker under the tool (--process: its words only): take's share etc."""
    vm.send(spawn)
    name = vm.expect("spawned").split()[1]
    args = ["--process", name] + (["--period", str(period)] if period else [])
    tool = Sampler(bench, vm.pid, event, args)
    vm.send(f"go {ms}")
    vm.expect("done", 120)
    folded, stats = tool.stop()
    shares = self_shares(folded, ["bb_alloc_mix:take/2", "bb_alloc_mix:give/2", "bb_alloc_mix:idle/2"])
    return {"take": shares["bb_alloc_mix:take/2"], "give": shares["bb_alloc_mix:give/2"],
            "idle": shares["bb_alloc_mix:idle/2"], "samples": stats.get("alloc_samples", stats.get("records", 0)),
            "watch": stats.get("alloc_watch", {})}


def cost(bench, vm, name, a):
    configs = ["none", "alloc", "alloc-pair", "alloc-gc"]
    log(f"{name}: cost on a GC-heavy loop")
    gc = overhead(bench, vm, a.rounds, a.work, configs + (["tprof"] if name == "otp27" else []), "time")
    log(f"{name}: cost on ordinary work")
    od = overhead(bench, vm, a.rounds, a.work // 200, configs, "time_mixed")
    pct = lambda x: f"{100 * (x['median_ratio'] - 1):+.1f}%"  # noqa: E731
    print(f"{name}: ordinary work: -e alloc {pct(od['alloc'])} (entry and return probes: {pct(od['alloc-pair'])}), "
          f"-e alloc-gc {pct(od['alloc-gc'])}; GC-heavy loop: -e alloc {pct(gc['alloc'])} (entry and return probes: "
          f"{pct(gc['alloc-pair'])}), -e alloc-gc {pct(gc['alloc-gc'])}"
          + (f", tprof call_memory {pct(gc['tprof'])}" if "tprof" in gc else ""), flush=True)
    return {"overhead_gc_heavy": gc, "overhead_ordinary": od}


def bif_bias(bench, vm, name):
    log(f"{name}: BIF allocations, 200 words in cells vs 200 in one make_tuple/2 (50/50)")
    result = {}
    for event in ("alloc", "alloc-gc"):
        # --period 256: a sample in nearly every epoch, ~3,500 in all (the default gives ~30 in
        # this burst of a few hundred milliseconds).
        period = ["--period", "256"] if event == "alloc" else []
        tool = Sampler(bench, vm.pid, event, ["--process", vm.ready_line.split()[1], *period])
        vm.send("bias 20000")
        vm.expect("bias_done", 120)
        folded, stats = tool.stop()
        result[event] = self_shares(folded, ["bb_alloc:alloc_small/2", "bb_alloc:alloc_big/1"])
        result[event]["samples"] = stats.get("alloc_samples", stats.get("records", 0))
    print(f"{name}: BIF 50/50: " + ", ".join(
        f"{e} {v['bb_alloc:alloc_small/2']:.1f}/{v['bb_alloc:alloc_big/1']:.1f} ({v['samples']} samples)"
        for e, v in result.items()), flush=True)
    return {"bif_bias": result}


def sweep(bench, vm, name, ms):
    rows = []
    for t, g, d in SWEEP:
        row = {"take_cells": t, "give_cells": g, "depth": d, "truth": 100.0 * t / (t + g)}
        for event in ("alloc", "alloc-gc"):
            row[event] = mix(bench, vm, f"mix {t} {g} {d}", ms, event, 256 if event == "alloc" else None)
        log(f"{name}: take({t})/give({g}) {d} deep: take {row['alloc']['take']:.1f}% "
            f"({row['alloc']['samples']} samples) by -e alloc, {row['alloc-gc']['take']:.1f}% "
            f"by -e alloc-gc; truth {row['truth']:.1f}%")
        rows.append(row)
    worst = max(abs(row["alloc"]["take"] - row["truth"]) for row in rows)
    worst_gc = max(abs(row["alloc-gc"]["take"] - row["truth"]) for row in rows)
    print(f"{name}: sweep of {len(SWEEP)} pairs: take's share at most {worst:.1f} points off by -e alloc, "
          f"{worst_gc:.1f} by -e alloc-gc", flush=True)
    return {"sweep": rows}


def interval(bench, vm, name, ms):
    rows = []
    for t, g in ((300, 100), (3000, 1000)):
        for period in INTERVALS:
            m = mix(bench, vm, f"mix {t} {g} 0", ms * 2, "alloc", period)
            log(f"{name}: take({t})/give({g}) --period {period}: take {m['take']:.1f}% from {m['samples']} "
                f"samples, LATE {m['watch'].get('late', 0)} of {m['watch'].get('flips', 0)} flips")
            rows.append({"take_cells": t, "give_cells": g, "period": period, **m})
    return {"interval": rows}


def main():
    ap = arg_parser(__doc__, "bench-alloc.json")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--work", type=int, default=20000, help="GC-heavy rounds per timing")
    ap.add_argument("--seconds", type=float, default=2.0, help="per sweep pair")
    ap.add_argument("--parts", default="cost,bif,sweep,interval", help="which parts to run, comma-separated")
    a = ap.parse_args()
    require_root("alloc.py")
    bench = Bench(a.build)
    parts = set(a.parts.split(","))
    ms = int(a.seconds * 1000)
    releases = [("otp25", "erl", "erlc")]
    if os.path.exists(os.path.join(OTP27, "erl")):
        releases.append(("otp27", os.path.join(OTP27, "erl"), os.path.join(OTP27, "erlc")))
    result = {}
    try:
        for name, erl, erlc in releases:
            r = result[name] = {}
            with tempfile.TemporaryDirectory() as beams:
                compile_workloads(beams, ["bb_alloc", "bb_alloc_mix"], erlc)
                if parts & {"cost", "bif"}:
                    with Vm(beams, "bb_alloc:main()", erl=erl) as vm:
                        if "cost" in parts:
                            r.update(cost(bench, vm, name, a))
                        if "bif" in parts:
                            r.update(bif_bias(bench, vm, name))
                        vm.quit()
                if parts & {"sweep", "interval"}:
                    with Vm(beams, "bb_alloc_mix:main()", erl=erl) as vm:
                        if "sweep" in parts:
                            r.update(sweep(bench, vm, name, ms))
                        if "interval" in parts:
                            r.update(interval(bench, vm, name, ms))
                        vm.quit()
    finally:
        end_started()
    if len(releases) == 1:
        print("alloc.py: no OTP 27 test VM (scripts/build-test-vms.sh): tprof not compared", flush=True)
    write_json(a.json, result)


if __name__ == "__main__":
    main()
