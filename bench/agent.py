#!/usr/bin/env python3
"""beam-bpf-agent's own cost with 1, 5 and 20 VMs on the host, and its memory per added VM.

For each count N (--vms, default 1,5,20), N Debian OTP 25 VMs run `bb_work` `busy2 +S 1` (two
busy Erlang processes on one scheduler: samples on every VM, not more CPU than 2 cores can
share; --workload idle for many VMs on few cores), the agent follows them (--match on their node names) at its default rate for --seconds
after they are all attached, and the figures are read from outside: its CPU time
(/proc/PID/stat, user + system, as a share of one CPU), its RSS (/proc/PID/statm), and the
kernel memory of the BPF programs and maps it holds (bpftool's bytes_memlock of the objects
whose owner is the agent). Per added VM: (figure at the largest N - figure at 1) / (N - 1).
Also the seconds from the agent's start to its last VM's attach line.

The overhead part (--parts overhead): what the agent costs the VMs it follows, at its default
rate next to 999 Hz. Each round starts a fresh VM running bench_work's fixed CPU-bound work
on every scheduler (as section 1), warms it up, then times the work once with no agent, once
followed by the agent at -F 99 and once at -F 999, in an order rotated from round to round;
each agent is started (and has attached) before `go` and ended with SIGTERM after `done`. The
figure is the median over rounds of the same-VM ratio, with its quartiles: the VM-to-VM
spread is larger than what is being judged.

    bench/agent.py [--parts memory,overhead] [--vms 1,5,20] [--seconds 20] [--frequency 99]
                   [--rounds 8] [--iters 6000000] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
AGENT = os.path.join(ROOT, "build", "beam-bpf-agent")
TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def rss_kib(pid):
    return int(open(f"/proc/{pid}/statm").read().split()[1]) * PAGE // 1024


def bpf_kib(pid):
    """Kernel memory of the BPF maps and programs the agent holds: the memlock of each, from
    /proc/PID/fdinfo (each object once, by id), and its perf events (counted, not sized)."""
    seen, total, events = set(), 0, 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
            info = open(f"/proc/{pid}/fdinfo/{fd}").read()
        except OSError:
            continue
        if link == "anon_inode:[perf_event]":
            events += 1
        if not link.startswith("anon_inode:bpf-"):
            continue
        kv = dict(l.split(":", 1) for l in info.splitlines() if ":" in l)
        key = (link, kv.get("map_id", kv.get("prog_id", fd)).strip())
        if key in seen:
            continue
        seen.add(key)
        total += int(kv.get("memlock", "0").strip() or 0)
    return total // 1024, events


def start_agent(freq, out_dir, match):
    """The agent at `freq` Hz following the VMs `match` names, once it has said it attached."""
    agent = subprocess.Popen([AGENT, "-F", str(freq), "--every", "60", "--output", out_dir, "--match", match],
                             stderr=subprocess.PIPE, text=True)
    said = ""
    for said in agent.stderr:
        if "attached to" in said:
            return agent
        if "refused" in said:
            break
    agent.kill()
    raise SystemExit(f"agent.py: the agent did not attach: {said.strip()}")


def overhead(a, tmp):
    """Rounds of (none, agent at the default rate, agent at 999 Hz) on one VM each: same-VM ratios."""
    subprocess.run(["erlc", "-o", tmp, os.path.join(ROOT, "bench", "bench_work.erl")], check=True)
    configs = {"none": None, "default": a.frequency, "999": 999}
    runs = []  # (round, config, ns)
    for rnd in range(a.rounds):
        vm = subprocess.Popen(["erl", "-noshell", "-pa", tmp, "-sname", "bbagentov",
                               "-eval", f"bench_work:main(overhead, {a.iters})"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            def say(cmd, reply):
                if cmd:
                    vm.stdin.write(cmd + "\n")
                    vm.stdin.flush()
                for line in vm.stdout:
                    if line.startswith(reply):
                        return line.split()
                raise SystemExit(f"agent.py: the VM ended before `{reply}`")
            say(None, "ready")
            say("warm", "warm")
            order = list(configs)[rnd % 3:] + list(configs)[:rnd % 3]
            for name in order:
                agent = start_agent(configs[name], os.path.join(tmp, "ov"), "-sname bbagentov ") if configs[name] else None
                ns = int(say("go", "done")[1])
                if agent:
                    agent.terminate()
                    agent.communicate(timeout=30)
                runs.append((rnd, name, ns))
                print(f"  round {rnd + 1} {name}: {ns / 1e9:.3f} s", flush=True)
        finally:
            vm.kill()
            vm.wait()
    result = {}
    for name in ("default", "999"):
        base = {r: ns for r, c, ns in runs if c == "none"}
        v = sorted(ns / base[r] for r, c, ns in runs if c == name)
        k = (len(v) + 3) // 4
        result[name] = {"hz": configs[name], "paired_overhead_pct": round(100 * (statistics.median(v) - 1), 2),
                        "q1_pct": round(100 * (v[k - 1] - 1), 2), "q3_pct": round(100 * (v[len(v) - k] - 1), 2)}
        print(f"agent at {configs[name]} Hz: VM throughput overhead {result[name]['paired_overhead_pct']:+.2f}% "
              f"(same VM, median of {len(v)} rounds; quartiles {result[name]['q1_pct']:+.2f}% to "
              f"{result[name]['q3_pct']:+.2f}%)", flush=True)
    none = [ns for _, c, ns in runs if c == "none"]
    result["none_mad_pct"] = round(100 * statistics.median(abs(x - statistics.median(none)) for x in none)
                                   / statistics.median(none), 2)
    print(f"baseline runs spread (median abs. deviation) {result['none_mad_pct']}% of their median")
    return {"rounds": a.rounds, "iters": a.iters, "runs": runs, **result}


def memory(a, tmp):
    """The agent's CPU, RSS and BPF memory with each count of VMs, and per added VM."""
    counts = [int(n) for n in a.vms.split(",")]
    rows = []
    subprocess.run(["erlc", "-o", tmp, os.path.join(ROOT, "tests", "workloads", "bb_work.erl")], check=True)
    for n in counts:
        vms = []
        try:
            for i in range(n):
                p = subprocess.Popen(["erl", "-noshell", "-pa", tmp, "+S", "1", "-sname", f"bbbench{i}",
                                      "-eval", f"bb_work:main({a.workload})"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
                vms.append(p)
            for p in vms:
                for line in p.stdout:
                    if line.startswith("ready"):
                        break
            t0 = time.monotonic()
            agent = subprocess.Popen([AGENT, "-F", str(a.frequency), "--every", "10", "--output",
                                      os.path.join(tmp, f"out{n}"), "--match", "-sname bbbench[0-9]+ "],
                                     stderr=subprocess.PIPE, text=True)
            attached = []
            for line in agent.stderr:
                if "attached to" in line:
                    attached.append(round(time.monotonic() - t0, 2))
                    if len(attached) == n:
                        break
                if "refused" in line:
                    raise SystemExit("agent.py: " + line.strip())
            all_attached_s = time.monotonic() - t0
            c0, w0 = cpu_s(agent.pid), time.monotonic()
            time.sleep(a.seconds)
            c1, w1 = cpu_s(agent.pid), time.monotonic()
            kib, events = bpf_kib(agent.pid)
            row = {"vms": n, "agent_cpu_pct": round(100 * (c1 - c0) / (w1 - w0), 2),
                   "agent_rss_kib": rss_kib(agent.pid), "bpf_kib": kib, "perf_events": events,
                   "attached_s": attached, "all_attached_s": round(all_attached_s, 2)}
            agent.terminate()
            agent.wait(timeout=30)
            rows.append(row)
            print(f"{n:3d} VMs: agent CPU {row['agent_cpu_pct']:5.2f}% of one CPU, RSS {row['agent_rss_kib']} KiB, "
                  f"BPF objects {row['bpf_kib']} KiB, {events} perf events, attached at {attached} s after start", flush=True)
        finally:
            for p in vms:
                p.kill()
                p.wait()
    per_vm = {}
    if len(rows) > 1:
        lo, hi = rows[0], rows[-1]
        d = hi["vms"] - lo["vms"]
        per_vm = {k: round((hi[k] - lo[k]) / d, 1) for k in ("agent_rss_kib", "bpf_kib", "agent_cpu_pct")}
        print(f"per added VM: RSS {per_vm['agent_rss_kib']} KiB, BPF objects {per_vm['bpf_kib']} KiB, "
              f"CPU {per_vm['agent_cpu_pct']}% of one CPU")
    return {"frequency": a.frequency, "seconds": a.seconds, "workload": a.workload, "rows": rows,
            "per_added_vm": per_vm}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default="memory,overhead")
    ap.add_argument("--rounds", type=int, default=8, help="overhead rounds")
    ap.add_argument("--iters", type=int, default=6000000, help="units of work per overhead run")
    ap.add_argument("--vms", default="1,5,20")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--frequency", type=int, default=99)
    ap.add_argument("--workload", default="busy2", help="bb_work's busy2, or idle (for many VMs on few cores)")
    ap.add_argument("--json", default="bench-agent.json")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory of the tools")
    a = ap.parse_args()
    global AGENT
    AGENT = os.path.join(a.build, "beam-bpf-agent")
    if os.geteuid() != 0:
        raise SystemExit("agent.py: run as root")
    parts = a.parts.split(",")
    result = {}
    with tempfile.TemporaryDirectory() as tmp:
        if "memory" in parts:
            result.update(memory(a, tmp))
        if "overhead" in parts:
            result["overhead"] = overhead(a, tmp)
    json.dump(result, open(a.json, "w"), indent=2)


if __name__ == "__main__":
    sys.exit(main())
