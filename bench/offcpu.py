#!/usr/bin/env python3
"""beam-bpf-sample -e offcpu: what it costs the VM it profiles, where that VM blocks and wakes most.

bench_work's `pingpong`: 50 pairs of processes exchange a fixed number of messages, sleeping
2 ms every 1,000, on +S 2: the schedulers switch out and in all the time. Rounds as section 11's:
a fresh VM, warmed up, then the work timed once without the tool and once while -e offcpu
profiles it at its default threshold, in an order alternated from round to round; the figure is
the median over rounds of the same-VM ratio, with its quartiles. During the profiled runs the
kernel's BPF statistics (kernel.bpf_stats_enabled) give each program's runs and nanoseconds:
the scheduler switch and wakeup hooks run for every thread of the machine, the system-call
return hook for every system call of the machine.

    bench/offcpu.py [--rounds 8] [--messages 200000] [--json FILE]
"""
import json
import os
import statistics
import subprocess
import tempfile

from lib import ROOT, Bench, Vm, arg_parser, require_root, write_json

PROGS = ("on_switch", "on_wakeup", "on_sys_exit", "on_sys_exit_fast")


def prog_stats():
    out = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                                    check=True).stdout)
    return {p["name"]: (p.get("run_cnt", 0), p.get("run_time_ns", 0)) for p in out if p.get("name") in PROGS}


def main():
    ap = arg_parser(__doc__, "bench-offcpu.json")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--messages", type=int, default=200000)
    a = ap.parse_args()
    require_root("offcpu.py")
    sample = Bench(a.build).tool("beam-bpf-sample")
    runs, bpf = [], {}
    subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=1"], check=True)
    try:
        with tempfile.TemporaryDirectory() as beams:
            subprocess.run(["erlc", "-o", beams, os.path.join(ROOT, "bench", "bench_work.erl")], check=True)
            for rnd in range(a.rounds):
                vm = Vm(beams, f"bench_work:main(pingpong, {a.messages})", flags=["+S", "2"])
                try:
                    vm.send("warm")
                    vm.expect("warm")
                    for name in (("none", "offcpu") if rnd % 2 == 0 else ("offcpu", "none")):
                        tool = None
                        if name == "offcpu":
                            tool = subprocess.Popen([sample, "-e", "offcpu", "-f", "folded", "-o", "/dev/null",
                                                     str(vm.pid)], stdout=subprocess.DEVNULL,
                                                    stderr=subprocess.PIPE, text=True)
                            for line in tool.stderr:
                                if "attached" in line:
                                    break
                            before = prog_stats()
                        vm.send("go")
                        ns = int(vm.expect("done").split()[1])
                        if tool:
                            after = prog_stats()
                            for k in after:
                                c0, t0 = before.get(k, (0, 0))
                                c, t = bpf.get(k, (0, 0))
                                bpf[k] = (c + after[k][0] - c0, t + after[k][1] - t0)
                            tool.send_signal(2)
                            tool.communicate(timeout=30)
                        runs.append((rnd, name, ns))
                        print(f"  round {rnd + 1} {name}: {ns / 1e9:.3f} s", flush=True)
                finally:
                    vm.quit()
    finally:
        subprocess.run(["sysctl", "-qw", "kernel.bpf_stats_enabled=0"], check=False)
    base = {r: ns for r, c, ns in runs if c == "none"}
    v = sorted(ns / base[r] for r, c, ns in runs if c == "offcpu")
    k = (len(v) + 3) // 4
    profiled_s = sum(ns for r, c, ns in runs if c == "offcpu") / 1e9
    progs = {name: {"runs_per_s": round(c / profiled_s), "ns_per_run": round(t / c, 1) if c else 0,
                    "cpu_pct": round(100 * t / 1e9 / profiled_s, 2)} for name, (c, t) in bpf.items()}
    result = {"rounds": a.rounds, "messages": a.messages, "runs": runs, "bpf": progs,
              "paired_overhead_pct": round(100 * (statistics.median(v) - 1), 2),
              "q1_pct": round(100 * (v[k - 1] - 1), 2), "q3_pct": round(100 * (v[len(v) - k] - 1), 2)}
    for name, p in progs.items():
        print(f"{name}: {p['runs_per_s']} runs/s, {p['ns_per_run']} ns a run, {p['cpu_pct']}% of a CPU", flush=True)
    print(f"-e offcpu at its defaults: VM throughput overhead {result['paired_overhead_pct']:+.2f}% (same VM, median "
          f"of {len(v)} rounds; quartiles {result['q1_pct']:+.2f}% to {result['q3_pct']:+.2f}%)", flush=True)
    write_json(a.json, result)


if __name__ == "__main__":
    main()
