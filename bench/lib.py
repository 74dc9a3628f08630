"""What every bench section shares: where the tools are (--build), starting a VM on a test
workload, running a tool and reading its --stats, and the statistics of repeated runs.

Sections import it:  from lib import Bench, Vm, median_spread
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = os.path.join(ROOT, "tests", "workloads")


def arg_parser(doc, json_default):
    """The options every section takes: --build DIR (the tools) and --json FILE (the figures)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory of the tools")
    ap.add_argument("--json", default=json_default)
    return ap


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# Every process started through spawn(): end_started() kills those still running, so a failed
# or interrupted bench leaves no VM spinning on the machine.
_started = []


def spawn(args, **kw):
    p = subprocess.Popen(args, **kw)
    _started.append(p)
    return p


def end_started():
    for p in _started:
        if p.poll() is None:
            p.kill()
            p.wait()


def require_root(section):
    if os.geteuid() != 0:
        raise SystemExit(f"{section}: run as root")


class Bench:
    """The tools of one build directory."""

    def __init__(self, build):
        self.build = os.path.abspath(build)

    def tool(self, name):
        path = os.path.join(self.build, name)
        if not os.access(path, os.X_OK):
            raise SystemExit(f"bench: {path} not built (cmake --build {self.build})")
        return path

    def run(self, name, args, timeout=300):
        """Runs a tool to its end; returns (its --stats JSON or None, stderr). Fails loudly."""
        with tempfile.NamedTemporaryFile(suffix=".json") as st:
            stats = ["--stats", st.name] if name in ("beam-bpf-sample", "beam-bpf-blame") else []
            r = subprocess.run([self.tool(name), *args[:-1], *stats, args[-1]], capture_output=True, text=True,
                               timeout=timeout)
            if r.returncode != 0:
                raise SystemExit(f"bench: {name} failed: {r.stderr.strip()}")
            return (json.load(open(st.name)) if stats else None), r.stderr

    def start(self, name, args, timeout=60, stdout=subprocess.DEVNULL, env=None):
        """A tool left running until stop(): returns once it has attached (killed if it has not
        within `timeout` s, which ends the read). `env`: variables added to this one's."""
        p = spawn([self.tool(name), *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                  env={**os.environ, **env} if env else None)
        watchdog = threading.Timer(timeout, p.kill)
        watchdog.start()
        said = []
        try:
            for line in p.stderr:
                if ": attached to " in line:
                    return p
                said.append(line)
        finally:
            watchdog.cancel()
        p.wait()
        raise SystemExit(f"bench: {name} did not attach: {''.join(said).strip()}")

    @staticmethod
    def stop(p):
        """SIGINT (Ctrl-C: the tool ends its run normally); returns the rest of its stderr."""
        p.send_signal(2)
        return p.communicate()[1]


def summary(stderr):
    """(records, dropped) from beam-bpf-sample's last summary line."""
    found = re.findall(r"^beam-bpf-[a-z]*: (\d+) samples in .*s, (\d+) dropped,", stderr, re.M)
    return tuple(map(int, found[-1])) if found else (0, 0)


def compile_workloads(out_dir, modules, erlc="erlc"):
    for m in modules:
        subprocess.run([erlc, "-o", out_dir, os.path.join(WORKLOADS, m + ".erl")], check=True)


class Vm:
    """An `erl` running `expr` from the workloads in `beams`, ready when it prints `ready` (the
    test workloads' convention). `erl` execs beam.smp, so its pid is the VM's."""

    def __init__(self, beams, expr, erl="erl", flags=(), ready="ready", env=None, cwd=None, timeout=None):
        self.expr = expr
        self.p = spawn([erl, *flags, "-noshell", "-pa", beams, "-eval", expr], stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, text=True, env=env, cwd=cwd)
        self.pid = self.p.pid
        self.ready_line = self.expect(ready, timeout) if ready else ""

    def send(self, line):
        self.p.stdin.write(line + "\n")
        self.p.stdin.flush()

    def expect(self, prefix, timeout=None):
        """The VM's next line that starts with `prefix`. Fails if the VM ends first or, given a
        timeout, does not print it within that many seconds (then it is killed, which ends the read)."""
        watchdog = threading.Timer(timeout, self.p.kill) if timeout else None
        if watchdog:
            watchdog.start()
        try:
            for line in self.p.stdout:
                if line.startswith(prefix):
                    return line.strip()
        finally:
            if watchdog:
                watchdog.cancel()
        raise SystemExit(f"bench: {self.expr} ended before `{prefix}`")

    def quit(self, timeout=30):
        """`quit` (the workloads' command to halt); killed if still there after `timeout` s."""
        try:
            self.send("quit")
            self.p.stdin.close()
            self.p.wait(timeout)
        except (BrokenPipeError, subprocess.TimeoutExpired):
            self.close()

    def close(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def load1():
    return float(open("/proc/loadavg").read().split()[0])


def busy_cpu_s():
    """CPU seconds the machine has been busy since boot, all CPUs: user, nice, system, irq,
    softirq and steal (not idle or iowait)."""
    f = open("/proc/stat").readline().split()
    return sum(int(f[i]) for i in (1, 2, 3, 6, 7, 8)) / os.sysconf("SC_CLK_TCK")


def own_cpu_s():
    """User + system seconds of this process and of every child it has waited for (VMs, tools,
    perf): what the bench itself used."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class OthersCpu:
    """From its creation on: the wall time, and the share of the machine's CPUs that processes
    other than the bench used (the machine's busy time less the bench's own)."""

    def __init__(self):
        self.t0, self.busy0, self.own0 = time.monotonic(), busy_cpu_s(), own_cpu_s()

    def seconds(self):
        return time.monotonic() - self.t0

    def pct(self):
        others = (busy_cpu_s() - self.busy0) - (own_cpu_s() - self.own0)
        return max(0.0, 100 * others / (self.seconds() * len(os.sched_getaffinity(0))))


def wait_quiet(max_load, max_others_pct, at_most):
    """Waits until the 1-minute load average is <= max_load and other processes use <= max_others_pct
    of the CPUs (over 5 s), checking every 10 s, at most `at_most` s; returns the seconds waited."""
    def quiet():
        if load1() > max_load:
            return False
        w = OthersCpu()
        time.sleep(5)
        return w.pct() <= max_others_pct
    waited = 0
    while not quiet():
        if waited >= at_most:
            log(f"load average still {load1()} after {waited}s: running anyway (see others_cpu_pct in the results)")
            break
        if waited == 0:
            log(f"other work running (load average {load1()}, limit {max_load}; CPU limit {max_others_pct}%): "
                f"waiting (at most {at_most}s)")
        time.sleep(10)
        waited += 10
    return waited


def verdict(ok):
    """A figure against its target, in the table."""
    return "met" if ok else "NOT met"


def median_spread(values):
    """(median, half the range): the figure and its spread over repeated runs."""
    if not values:
        return 0.0, 0.0
    return statistics.median(values), (max(values) - min(values)) / 2


def write_json(path, result):
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {path}")
