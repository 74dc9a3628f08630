#!/usr/bin/env python3
"""The body of scripts/bench.sh (whose header, printed by --help, describes the sections): the
options, the wait for a quiet machine, sections 1 to 5 (bench/overhead.py, depth.py, lost.py,
userspace.py, startup.py), their table and JSON, then sections 6 to 11 (their own scripts).

A section module has run(r), which measures and stores its figures in r.R, and report(r), which
returns its lines of the table and its rows of targets. One section alone, with the same options:
python3 bench/depth.py [--quick] ... (it is `scripts/bench.sh --sections 2`).
"""
import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import depth
import lost
import overhead
import startup
import userspace
from lib import ROOT, WORKLOADS, Bench, OthersCpu, Vm, end_started, load1, log, wait_quiet

SECTIONS = {"1": overhead, "2": depth, "3": lost, "4": userspace, "5": startup}
SCRIPTS = (  # number, script, title; neighbour is not run with --quick
    ("6", "neighbour", "a busy neighbour's throughput, per-thread events vs --per-cpu"),
    ("7", "procs", "beam-bpf-procs on 200,000 processes"),
    ("8", "alloc", "beam-bpf-sample -e alloc: cost and bias"),
    ("9", "native", "native frames: time per frame, tables, start-up"),
    ("10", "agent", "beam-bpf-agent: its CPU, RSS and kernel memory with 1, 5 and 20 VMs; VM overhead at 99 and 999 Hz"),
    ("11", "wall", "beam-bpf-sample -e wall: its cost against 1k, 100k and 1M processes; VM overhead"),
    ("12", "offcpu", "beam-bpf-sample -e offcpu: BPF time per switch, wakeup and system call; VM overhead"),
    ("13", "attach", "the first second on a busy node: to the attach line and the first sample, per step"))


def header():
    """scripts/bench.sh's header comment: the one description of the sections and options."""
    lines = open(os.path.join(ROOT, "scripts", "bench.sh")).read().splitlines()[1:]
    return "\n".join(l[2:] for l in lines[:next(i for i, l in enumerate(lines) if not l.startswith("#"))])


def options(sections):
    ap = argparse.ArgumentParser(prog="scripts/bench.sh", description=header(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", "-o", default="bench-results.json")
    ap.add_argument("--runs", type=int, help="overhead rounds (12; 2 with --quick)")
    ap.add_argument("--iters", type=int, help="units of work per overhead run (6,000,000; 2,000,000 with --quick)")
    ap.add_argument("--sections", default=sections)
    ap.add_argument("--build", default="build")
    ap.add_argument("--max-load", type=float, default=1.5,
                    help="wait while the 1-minute load average (others' work) is above this")
    ap.add_argument("--max-others", type=float, default=10,
                    help="... or while other processes use more than this %% of the CPUs (5 s sample)")
    ap.add_argument("--load-wait", type=int, default=900,
                    help="... for at most this many seconds, then run anyway and say so")
    ap.add_argument("--soak", type=int, nargs="?", const=3600, metavar="SECONDS")
    ap.add_argument("--agent-soak", type=int, nargs="?", const=3600, metavar="SECONDS")
    a = ap.parse_args()
    # Work per overhead run: 6 M units of bench_work:unit/1 take about 3.5 s on the 2 vCPU
    # machine this was written on (a workload size, not a result).
    if a.runs is None:
        a.runs = 2 if a.quick else 12
    if a.iters is None:
        a.iters = 2000000 if a.quick else 6000000
    a.json, a.build = os.path.abspath(a.json), os.path.abspath(a.build)
    a.sections = a.sections.split(",")
    return a


class Run:
    """One run of the bench: its options and durations, its scratch directory (the compiled
    workloads, the files of VMs and tools), and every figure by its dotted key (its path in the JSON)."""

    def __init__(self, a, tmp):
        self.a, self.tmp = a, tmp
        self.ebin = os.path.join(tmp, "ebin")
        self.bench = Bench(a.build)
        # Seconds per run of sections 2, 3 and 4, and replay passes of section 4.
        self.depth_s, self.lost_s, self.us_s, self.us_passes = (2, 5, 2, 5) if a.quick else (5, 30, 5, 20)
        self.R = {}
        self.stats_runs = []  # keys of every --stats run, for section 5

    def vm(self, expr, flags=()):
        return Vm(self.ebin, expr, flags=flags, cwd=self.tmp, timeout=120)

    def stats_run(self, key, st):
        """Start-up and memory figures of a --stats run (section 5)."""
        self.stats_runs.append(key)
        for k in ("first_record_s", "peak_rss_kib", "user_cpu_s", "sys_cpu_s", "jit_modules"):
            self.R[f"{key}.{k}"] = st[k]

    @contextlib.contextmanager
    def section(self, name):
        """Times a section and the share of the CPUs other processes used meanwhile."""
        self.R[f"{name}.loadavg_begin"] = load1()
        w = OthersCpu()
        yield
        self.R[f"{name}.seconds"] = w.seconds()
        self.R[f"{name}.others_cpu_pct"] = w.pct()
        self.R[f"{name}.loadavg_end"] = load1()


def erl_eval(expr):
    return subprocess.run(["erl", "-noshell", "-eval", f"io:format(\"~s\", [{expr}]), halt()."],
                          capture_output=True, text=True, check=True).stdout


def machine(r, waited):
    R = r.R
    R["machine.loadavg_at_start"] = load1()
    R["machine.load_wait_s"] = waited
    R["machine.cpus"] = len(os.sched_getaffinity(0))
    R["machine.kernel"] = os.uname().release
    R["machine.cpu_model"] = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                                   if l.startswith("model name")), "")
    R["machine.hw_pmu"] = "yes" if os.path.isdir("/sys/bus/event_source/devices/cpu") else "no"
    R["machine.otp"] = int(erl_eval("erlang:system_info(otp_release)"))
    R["machine.erts"] = erl_eval("erlang:system_info(version)")
    R["machine.perf_event_max_sample_rate_begin"] = int(open("/proc/sys/kernel/perf_event_max_sample_rate").read())
    R["config.quick"] = int(r.a.quick)
    R["config.runs"] = r.a.runs
    R["config.iters"] = r.a.iters


def table(r, blocks, targets):
    R = r.R
    lines = ["", f"beam-bpf bench: {R['machine.cpus']} CPUs ({R['machine.cpu_model']}), kernel {R['machine.kernel']}, "
                 f"hardware PMU: {R['machine.hw_pmu']}, OTP {R['machine.otp']} (erts {R['machine.erts']})",
             f"load average at start {R['machine.loadavg_at_start']} (waited {R['machine.load_wait_s']} s), at end "
             f"{R['machine.loadavg_at_end']}; {'QUICK run' if r.a.quick else 'full run'}, {R['bench.seconds']:.1f} s"]
    for b in blocks:
        lines += [""] + b
    lines += ["", "Targets"] + [f"   {a:<38} {b:<50} {c:<16} {d}" for a, b, c, d in targets] + [""]
    print("\n".join(lines), flush=True)


def nest(flat):
    """{"a.b.c": 1} -> {"a": {"b": {"c": 1}}}"""
    out = {}
    for key, v in flat.items():
        *path, last = key.split(".")
        d = out
        for p in path:
            d = d.setdefault(p, {})
        d[last] = v
    return out


def measure(a):
    Bench(a.build).tool("beam-bpf-sample")
    if not os.access(os.path.join(a.build, "beam-bpf-userspace-bench"), os.X_OK):
        subprocess.run(["cmake", "--build", a.build, "--target", "beam-bpf-userspace-bench", f"-j{os.cpu_count()}"],
                       stdout=subprocess.DEVNULL, check=True)
    for t in ("erl", "erlc", "perf", "bpftool"):
        if not shutil.which(t):
            raise SystemExit(f"bench.sh: {t} not found (scripts/setup.sh --tests installs it)")
    with tempfile.TemporaryDirectory(prefix="beam-bpf-bench.") as tmp:
        r = Run(a, tmp)
        machine(r, wait_quiet(a.max_load, a.max_others, a.load_wait))
        t0 = time.monotonic()
        log("compiling workloads")
        os.mkdir(r.ebin)
        subprocess.run(["erlc", "-o", r.ebin, os.path.join(ROOT, "bench", "bench_work.erl"),
                        os.path.join(WORKLOADS, "bb_work.erl")], check=True)
        try:
            for n, section in SECTIONS.items():
                if n in a.sections and hasattr(section, "run"):
                    section.run(r)
        finally:
            end_started()
    R = r.R
    R["machine.perf_event_max_sample_rate_end"] = int(open("/proc/sys/kernel/perf_event_max_sample_rate").read())
    R["machine.loadavg_at_end"] = load1()
    R["bench.seconds"] = time.monotonic() - t0
    # Section 5 is made of the --stats runs of the others: it is there when they are.
    blocks, targets = [], []
    for n, section in SECTIONS.items():
        if n in a.sections or section is startup:
            lines, rows = section.report(r)
            blocks += [lines] if lines else []
            targets += rows
    table(r, blocks, targets)
    with open(a.json, "w") as f:
        json.dump(nest(R), f, indent=2, sort_keys=True)
        f.write("\n")
    log(f"wrote {a.json}")


def main(sections="1,2,3,4,5,6,7,8,9,10,11"):
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))  # the finally blocks end our VMs
    os.chdir(ROOT)  # relative --json and --build are the repository's, wherever it was started
    a = options(sections)
    stem = a.json.removesuffix(".json")
    if a.agent_soak is not None:
        os.execvp("python3", ["python3", os.path.join(ROOT, "bench", "agent_soak.py"), "--build", a.build,
                              "--seconds", str(a.agent_soak), "--json", f"{stem}-agent-soak.json"])
    if a.soak is not None:
        os.execvp("python3", ["python3", os.path.join(ROOT, "bench", "soak.py"), "--build", a.build,
                              "--seconds", str(a.soak), "--json", f"{stem}-soak.json"])
    if os.geteuid() != 0:
        raise SystemExit("bench.sh: run as root (BPF, perf and bpf_stats need it)")
    measure(a)  # also when only sections 6 to 11 run: they too wait for a quiet machine
    for n, script, title in SCRIPTS:
        if n in a.sections and not (script == "neighbour" and a.quick):
            log(f"{n}. {title} (bench/{script}.py)")
            rc = subprocess.run(["python3", os.path.join(ROOT, "bench", f"{script}.py"), "--build", a.build,
                                 "--json", f"{stem}-{script}.json"]).returncode
            if rc:
                sys.exit(rc)


if __name__ == "__main__":
    main()
