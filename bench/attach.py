#!/usr/bin/env python3
"""The first second on a busy node: from beam-bpf-sample's start to its attach line and to its
first sample, the tool's own CPU meanwhile, and each step of attaching (its --stats `attach_ms`:
the executable, offsets, globals search, live checks, JIT index, names, unwind tables, BPF load
and attach, dictionary keys).

On three nodes whose work keeps both CPUs busy, --runs runs each (the median, and the worst):
- `atoms`: Debian's OTP 25 with 100,000 atoms, 10,000 idle processes and four spinners;
- `stripped29`: the same on the stripped OTP 29 test VM (scripts/build-test-vms.sh 29), whose
  globals are searched for in its memory;
- `rabbitmq`: Debian's RabbitMQ under the AMQP load of bench/rabbitmq.py.
A node whose VM is not installed is left out and said so. --build another build directory (an
older commit's) measures it the same way: its figures side by side are the before and after; a
build without `attach_ms` gives the totals only.

    bench/attach.py [--runs 5] [--nodes atoms,stripped29,rabbitmq] [--build DIR] [--json FILE]
"""
import json
import os
import statistics
import subprocess
import tempfile
import time

from lib import Bench, Vm, arg_parser, require_root, write_json

OTP29 = "/var/tmp/beam-bpf-otp29/stripped/bin/erl"
# 100,000 atoms, 10,000 idle processes, four spinners on +S 2: both CPUs busy.
BUSY = ("[list_to_atom(\"bench_atom_\" ++ integer_to_list(I)) || I <- lists:seq(1, 100000)], "
        "[spawn(fun() -> receive stop -> ok end end) || _ <- lists:seq(1, 10000)], "
        "[spawn(fun S() -> S() end) || _ <- lists:seq(1, 4)], io:format(\"ready~n\"), "
        "receive stop -> ok end.")


def one_run(sample, pid):
    """(seconds to the attach line, seconds to the first sample, the tool's CPU s, [[step, ms]])."""
    with tempfile.NamedTemporaryFile(suffix=".json") as st:
        t0 = time.monotonic()
        p = subprocess.Popen([sample, "-d", "1", "--stats", st.name, str(pid)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
        attached = None
        for line in p.stderr:
            if ": attached to " in line and attached is None:
                attached = time.monotonic() - t0
        if p.wait() != 0 or attached is None:
            raise SystemExit(f"attach.py: beam-bpf-sample failed on pid {pid}")
        s = json.load(open(st.name))
    return attached, s["first_record_s"], s["user_cpu_s"] + s["sys_cpu_s"], s.get("attach_ms", [])


def measure(sample, pid, runs):
    rows = [one_run(sample, pid) for _ in range(runs)]
    steps = {}
    for _, _, _, ms in rows:
        for step, v in ms:
            steps.setdefault(step, []).append(v)
    med = lambda xs: statistics.median(xs)
    return {"attach_line_s": med([r[0] for r in rows]), "attach_line_s_worst": max(r[0] for r in rows),
            "first_record_s": med([r[1] for r in rows]), "first_record_s_worst": max(r[1] for r in rows),
            "tool_cpu_s": med([r[2] for r in rows]), "tool_cpu_s_worst": max(r[2] for r in rows),
            "steps_ms": {k: med(v) for k, v in steps.items()}, "runs": runs}


def node(name):
    """A started node: (its pid, a function that ends it), or None where it is not installed."""
    if name in ("atoms", "stripped29"):
        erl = "erl" if name == "atoms" else OTP29
        if erl != "erl" and not os.access(erl, os.X_OK):
            return None
        vm = Vm("/nonexistent", BUSY, erl=erl, flags=["+S", "2"], timeout=120)
        time.sleep(2)  # past its start's own work
        return vm.pid, vm.close
    if not os.access("/usr/lib/rabbitmq/bin/rabbitmq-server", os.X_OK):
        return None
    import rabbitmq
    broker = rabbitmq.Broker("bbattach", "")
    load = subprocess.Popen([rabbitmq.PYTHON, rabbitmq.LOAD, str(broker.port), "3600"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    time.sleep(5)  # the load running

    def end():
        load.kill()
        load.wait()
        broker.close()
    return broker.pid, end


def main():
    ap = arg_parser(__doc__, "bench-attach.json")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--nodes", default="atoms,stripped29,rabbitmq")
    a = ap.parse_args()
    require_root("attach.py")
    sample = Bench(a.build).tool("beam-bpf-sample")
    result = {"build": os.path.abspath(a.build), "nodes": {}}
    for name in a.nodes.split(","):
        started = node(name)
        if not started:
            print(f"{name}: not installed here, left out")
            continue
        pid, end = started
        try:
            m = result["nodes"][name] = measure(sample, pid, a.runs)
        finally:
            end()
        print(f"{name}: attach line {m['attach_line_s']:.2f} s (worst {m['attach_line_s_worst']:.2f}), first sample "
              f"{m['first_record_s']:.2f} s (worst {m['first_record_s_worst']:.2f}), the tool's CPU "
              f"{m['tool_cpu_s']:.2f} s (worst {m['tool_cpu_s_worst']:.2f}); median of {a.runs} runs")
        if m["steps_ms"]:
            print("   " + ", ".join(f"{k} {v:.0f}" for k, v in m["steps_ms"].items()) + " (ms)")
    write_json(a.json, result)


if __name__ == "__main__":
    main()
