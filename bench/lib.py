"""What every bench section shares: where the tools are (--build), starting a VM on a test
workload, running a tool and reading its --stats, and the statistics of repeated runs.

Sections import it:  from lib import Bench, Vm, median_spread
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = os.path.join(ROOT, "tests", "workloads")


def arg_parser(doc, json_default):
    """The options every section takes: --build DIR (the tools) and --json FILE (the figures)."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory of the tools")
    ap.add_argument("--json", default=json_default)
    return ap


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

    def start(self, name, args):
        """A tool left running until stop(): returns once it has attached."""
        p = subprocess.Popen([self.tool(name), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        for line in p.stderr:
            if ": attached to " in line:
                return p
        raise SystemExit(f"bench: {name} did not attach")

    @staticmethod
    def stop(p):
        p.send_signal(2)
        p.wait()


def compile_workloads(out_dir, modules, erlc="erlc"):
    for m in modules:
        subprocess.run([erlc, "-o", out_dir, os.path.join(WORKLOADS, m + ".erl")], check=True)


class Vm:
    """An `erl` running `expr` from the workloads in `beams`, ready when it prints `ready` (the
    test workloads' convention). `erl` execs beam.smp, so its pid is the VM's."""

    def __init__(self, beams, expr, erl="erl", flags=(), ready="ready", env=None):
        self.p = subprocess.Popen([erl, *flags, "-noshell", "-pa", beams, "-eval", expr], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True, env=env)
        self.pid = self.p.pid
        self.ready_line = ""
        if ready:
            for line in self.p.stdout:
                if line.startswith(ready):
                    self.ready_line = line.strip()
                    return
            raise SystemExit(f"bench: {expr} ended before `{ready}`")

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


def median_spread(values):
    """(median, half the range): the figure and its spread over repeated runs."""
    if not values:
        return 0.0, 0.0
    return statistics.median(values), (max(values) - min(values)) / 2


def write_json(path, result):
    with open(path, "w") as f:
        json.dump(result, f, indent=2)
    print(f"wrote {path}")
