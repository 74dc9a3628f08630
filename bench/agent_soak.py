#!/usr/bin/env python3
"""Soak of beam-bpf-agent: one agent for a long time (default an hour) while VMs come and go
every few seconds, checked for what that breaks: memory that grows, descriptors or BPF objects
left behind by VMs that went.

A new VM starts every --churn seconds (`erl +S 1` running bb_work busy2, niced so it only takes
idle CPU: samples keep flowing without starving the machine), alternating between the builds
given with --erl (by default Debian's OTP 25, and OTP 27 from scripts/build-test-vms.sh when it
is there); once more than --live are up, the oldest goes, in turns by `quit` (a clean halt) and
by SIGKILL. The agent follows them by node name, writing a profile per VM every 10 s.

Every 5 s the agent's RSS, descriptors, perf events and the kernel memory of the BPF objects it
holds (fdinfo memlock) are read from outside, with the VMs it follows (its --stats). At the end:

  - memory flat: among readings taken while it followed exactly --live VMs, the median of the
    last tenth of the run within 10% of the median of the second tenth (the first is start-up),
    for its RSS and for its BPF kernel memory;
  - nothing left: once the last VM is gone and the agent has detached it, no perf event is
    open, every descriptor it opened since before the first VM is one of the BPF objects loaded
    once for all VMs (the walker's programs, maps and ring, and the shared unwind store's two
    arrays: no file, no perf event, no link of a VM), and its BPF kernel memory is what it was
    while it followed VMs (nothing of it was any VM's own);
  - every VM that lived long enough was attached (refusals are counted and printed).

Prints the figures and writes JSON; exit 1 if a check fails. Run as root after scripts/setup.sh --tests:

    bench/agent_soak.py [--seconds 3600] [--churn 4] [--live 3] [--erl PATH ...] [--build DIR] [--json FILE]
"""
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from lib import arg_parser, compile_workloads, end_started, require_root, rss_kib, spawn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from agent import bpf_kib  # noqa: E402  (the same reading as the agent bench)

OTP27 = "/var/tmp/beam-bpf-otp27/prefix/bin/erl"


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def fd_kinds(pid):
    """Its descriptors by what they are: "file", "socket", or the anon_inode's name."""
    kinds = collections.Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        kinds["file" if link.startswith("/") else link.split(":[")[0] if link.startswith("socket") else link] += 1
    return kinds


def rss_anon_kib(pid):
    """Its anonymous memory alone: the RSS less the pages of mapped files (the VMs' executables
    read for symbols, which depend on which builds are followed at the moment)."""
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("RssAnon:"):
            return int(line.split()[1])
    return 0


def stats(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return {}


def flat(readings, key, live, seconds):
    """(median of the second tenth, median of the last tenth, change %) of `key` over readings
    taken with `live` VMs followed."""
    at = [r for r in readings if r["vms_followed"] == live]
    second = [r[key] for r in at if 0.1 * seconds <= r["t"] < 0.2 * seconds]
    last = [r[key] for r in at if r["t"] >= 0.9 * seconds]
    if not second or not last:
        return None
    a, b = statistics.median(second), statistics.median(last)
    return a, b, 100 * (b - a) / a


def main():
    ap = arg_parser(__doc__, "agent-soak-results.json")
    ap.add_argument("--seconds", type=int, default=3600)
    ap.add_argument("--churn", type=float, default=4, help="seconds between two VM starts")
    ap.add_argument("--live", type=int, default=3, help="VMs up at once")
    ap.add_argument("--erl", action="append", help="an erl to start VMs with (repeat; default: erl, and OTP 27's)")
    a = ap.parse_args()
    require_root("agent_soak.py")
    erls = a.erl or ["erl"] + ([OTP27] if os.access(OTP27, os.X_OK) else [])
    agent_bin = os.path.join(os.path.abspath(a.build), "beam-bpf-agent")
    with tempfile.TemporaryDirectory() as tmp:
        compile_workloads(tmp, ["bb_work"])
        stats_file = os.path.join(tmp, "stats.json")
        agent = spawn([agent_bin, "--every", "10", "--output", os.path.join(tmp, "out"), "--stats", stats_file,
                       "--match", "-sname bbsoak[0-9]+ "], stderr=open(os.path.join(tmp, "agent.log"), "w"))
        time.sleep(2)
        before = {"fds": fds(agent.pid), "bpf": bpf_kib(agent.pid), "kinds": fd_kinds(agent.pid)}
        vms, gone, started, readings = [], [], 0, []
        t0 = time.monotonic()
        next_vm = next_reading = 0.0
        try:
            while (t := time.monotonic() - t0) < a.seconds:
                if agent.poll() is not None:
                    raise SystemExit(f"agent_soak.py: the agent exited ({agent.returncode})")
                if t >= next_vm:
                    erl = erls[started % len(erls)]
                    vms.append(spawn(["nice", "-n", "19", erl, "-noshell", "-pa", tmp, "+S", "1", "-sname",
                                      f"bbsoak{started}", "-eval", "bb_work:main(busy2)"], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL))
                    started += 1
                    next_vm += a.churn
                    if len(vms) > a.live:
                        old = vms.pop(0)
                        if started % 2:
                            old.kill()
                        else:
                            old.stdin.write(b"quit\n")
                        old.stdin.close()
                        gone.append(old)
                if t >= next_reading:
                    s = stats(stats_file)
                    kib, events = bpf_kib(agent.pid)
                    readings.append({"t": round(t, 1), "rss_kib": rss_kib(agent.pid),
                                     "rss_anon_kib": rss_anon_kib(agent.pid), "fds": fds(agent.pid),
                                     "bpf_kib": kib, "perf_events": events,
                                     "vms_followed": s.get("vms_followed", -1), "samples": s.get("samples", 0)})
                    next_reading += 5
                    if len(readings) % 60 == 1:
                        print(f"  {t:6.0f} s: {readings[-1]}", flush=True)
                gone = [p for p in gone if p.poll() is None]  # reaped as they end
                time.sleep(0.2)
        finally:
            for p in vms + gone:
                p.kill()
                p.wait()
        # The last VMs are gone: wait for the agent to see it (it scans once a second).
        for _ in range(50):
            if stats(stats_file).get("vms_followed") == 0:
                break
            time.sleep(0.2)
        time.sleep(1.5)
        after = {"fds": fds(agent.pid), "bpf": bpf_kib(agent.pid), "kinds": fd_kinds(agent.pid)}
        final = stats(stats_file)
        agent.terminate()
        agent.wait(30)
        log = open(os.path.join(tmp, "agent.log")).read()
    end_started()

    R = {"seconds": a.seconds, "churn_s": a.churn, "live": a.live, "erls": erls, "vms_started": started,
         "attached": final.get("vms_attached"), "detached": final.get("vms_detached"),
         "refused": final.get("vms_refused"), "samples": final.get("samples"), "dropped": final.get("ring_dropped"),
         "before": before, "after": after, "readings": readings}
    checks = []
    for key in ("rss_kib", "rss_anon_kib", "bpf_kib"):
        f = flat(readings, key, a.live, a.seconds)
        R[key + "_flat"] = f
        checks.append((f"{key} with {a.live} VMs: second tenth {f[0]:.0f}, last tenth {f[1]:.0f} ({f[2]:+.1f}%)"
                       if f else f"{key}: no readings with {a.live} VMs in both tenths", bool(f) and abs(f[2]) <= 10))
    # Loaded at the first attach for every VM: BPF programs, maps and BTF, and the ring's epoll.
    shared_kinds = {"anon_inode:bpf-map", "anon_inode:bpf-prog", "anon_inode:btf", "anon_inode:[eventpoll]"}
    added = after["kinds"] - before["kinds"]
    checks.append((f"descriptors {before['fds']} before the first VM, {after['fds']} after the last, the added ones "
                   f"{dict(added)}", set(added) <= shared_kinds and after["bpf"][1] == 0))
    while_followed = sorted(r["bpf_kib"] for r in readings if r["vms_followed"] > 0)
    held = while_followed[len(while_followed) // 2] if while_followed else None
    store_kib = final.get("unwind_store", {}).get("kernel_bytes", 0) // 1024
    checks.append((f"BPF objects {before['bpf'][0]} KiB before, {held} KiB (median) while following VMs, "
                   f"{after['bpf'][0]} KiB after (the unwind store: {store_kib} KiB); perf events after: {after['bpf'][1]}",
                   held is not None and after["bpf"][0] == held and after["bpf"][1] == 0))
    print(f"agent soak {a.seconds} s: {started} VMs started ({', '.join(erls)}), {R['attached']} attached, "
          f"{R['detached']} detached, {R['refused']} refused; {R['samples']} samples, {R['dropped']} dropped")
    for what, ok in checks:
        print(f"  {'ok  ' if ok else 'FAIL'} {what}")
    refusals = [l for l in log.splitlines() if "refused" in l]
    if refusals:
        print(f"  refusals ({len(refusals)}), first: {refusals[0]}")
    R["checks"] = [{"what": w, "ok": ok} for w, ok in checks]
    with open(a.json, "w") as f:
        json.dump(R, f, indent=2)
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
