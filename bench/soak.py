#!/usr/bin/env python3
"""Soak: beam-bpf-sample attached to a busy VM for a long time (default one hour at 999 Hz),
checked for what a long run breaks: memory growth, lost records, drifting results.

The VM runs split532 (bb_work.erl: one process whose time splits 5:3:2 between f5, f3 and f2,
timed inside the VM) next to bb_reload.erl (a module reloaded and purged, here once a second,
and its worker), so the code index changes all hour. Faster reloads grow the VM itself: OTP 25
never frees a loaded module's debugger entry, and beam-bpf keeps about 90 bytes for each to
recognise it (100 loads a second: +1.3 MB of the tool's RSS in 150 s, 0 dropped). The tool's RSS is read from /proc every 10 s. At the end:

  - RSS flat: the last reading within 5% of the reading at 10% of the run (start-up and the
    first symbolization are over by then);
  - zero records dropped (--stats);
  - the top functions where the VM's own timing puts them: f5/f3/f2 shares within 2 points of
    50/30/20 over the whole run.

Prints the figures and writes JSON; exit 1 if a check fails. Run as root after
scripts/setup.sh --tests, on demand (scripts/bench.sh --soak [SECONDS]):

    bench/soak.py [--seconds 3600] [--hz 999] [--reload-ms 1000] [--build DIR] [--json FILE]
"""
import json
import os
import subprocess
import sys
import tempfile
import time

from lib import Bench, Vm, arg_parser, compile_workloads
LEAVES = {"bb_work:f5/2": 50.0, "bb_work:f3/2": 30.0, "bb_work:f2/2": 20.0}


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def main():
    ap = arg_parser(__doc__, "soak-results.json")
    ap.add_argument("--seconds", type=int, default=3600)
    ap.add_argument("--hz", type=int, default=999)
    ap.add_argument("--reload-ms", type=int, default=1000, help="reload period of bb_reload (default 1000)")
    a = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        compile_workloads(tmp, ("bb_work", "bb_reload"))
        # split532 in the foreground process; the reload storm beside it. Both print "ready".
        expr = ("spawn(fun() -> bb_reload:main() end), bb_work:main(split532)")
        vm = Vm(tmp, expr, env=dict(os.environ, BB_RELOAD_PERIOD_MS=str(a.reload_ms)))
        try:
            stats = os.path.join(tmp, "stats.json")
            folded = os.path.join(tmp, "out.folded")
            tool = subprocess.Popen([Bench(a.build).tool("beam-bpf-sample"), "-F", str(a.hz), "-d", str(a.seconds), "--folded", "--only-erlang",
                                     "-o", folded, "--stats", stats, str(vm.pid)],
                                    stderr=subprocess.PIPE, text=True)
            rss = []  # (seconds since start, KiB)
            start = time.monotonic()
            while tool.poll() is None:
                time.sleep(10)
                r = rss_kib(tool.pid)
                if r is not None:
                    rss.append((time.monotonic() - start, r))
            err = tool.stderr.read()
            if tool.returncode != 0:
                sys.exit(f"soak.py: beam-bpf-sample failed ({tool.returncode}): {err.strip()}")
            with open(stats) as f:
                st = json.load(f)
            counts = {}
            with open(folded) as f:
                for line in f:
                    stack, n = line.rsplit(" ", 1)
                    leaf = stack.split(";")[-1]
                    counts[leaf] = counts.get(leaf, 0) + int(n)
        finally:
            vm.close()

    in_leaves = sum(counts.get(k, 0) for k in LEAVES)
    shares = {k: 100.0 * counts.get(k, 0) / in_leaves if in_leaves else 0.0 for k in LEAVES}
    early = next((r for t, r in rss if t >= a.seconds * 0.1), rss[0][1] if rss else None)
    last = rss[-1][1] if rss else None
    growth = 100.0 * (last - early) / early if early and last else None
    checks = {
        "rss_flat_within_5pct": growth is not None and abs(growth) <= 5.0,
        "zero_dropped": st["dropped"] == 0,
        "shares_within_2_points": all(abs(shares[k] - LEAVES[k]) <= 2.0 for k in LEAVES),
    }
    result = {"seconds": a.seconds, "hz": a.hz, "records": st["records"], "dropped": st["dropped"],
              "code_events": st.get("code_events"), "rss_kib_samples": rss, "rss_kib_at_10pct": early,
              "rss_kib_last": last, "rss_growth_pct": growth, "shares": shares, "checks": checks}
    with open(a.json, "w") as f:
        json.dump(result, f, indent=2)
    print(f"soak {a.seconds} s at {a.hz} Hz: {st['records']} samples, {st['dropped']} dropped, "
          f"{st.get('code_events')} code events; RSS {early} KiB at 10% -> {last} KiB at the end "
          f"({growth:+.1f}%); shares " + ", ".join(f"{k.split(':')[1]} {v:.1f}%" for k, v in shares.items()))
    for name, ok in checks.items():
        print(f"  {'ok  ' if ok else 'FAIL'} {name}")
    sys.exit(0 if all(checks.values()) else 1)


if __name__ == "__main__":
    main()
