#!/usr/bin/env python3
"""What profiling costs a real application: RabbitMQ (Debian's rabbitmq-server, OTP 25) under
a localhost AMQP load (tests/workloads/bb_rabbitmq_load.py: one python3-pika publisher, one
consumer), with no profiler, with beam-bpf-sample at 999 Hz, at 19 Hz (a continuous-profiling
agent's rate) and with -e alloc, the configurations alternated round by round on one broker;
next to `perf record -g` at 999 Hz on a second broker started with +JPperf true (frame pointers
and the VM's own perf map: what perf needs to see Erlang stacks), against that broker's own
no-profiler rounds.

Two figures per configuration, each relative to the same round's no-profiler run, median and
spread (min..max) over the rounds:
- throughput: messages per second the consumer received. On a 2-core machine the Python load
  generator is the bottleneck, so this mostly shows noise;
- VM CPU per message: beam.smp's user+system CPU time (/proc/PID/stat, which includes the BPF
  program run in the sampled threads' context and perf's interrupts) over the messages it
  handled. This is where an overhead shows when the VM is not the bottleneck.

Run as root after scripts/setup.sh --tests:

    bench/rabbitmq.py [--rounds 5] [--seconds 10] [--json FILE]
"""
import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE = os.path.join(ROOT, "build", "beam-bpf-sample")
LOAD = os.path.join(ROOT, "tests", "workloads", "bb_rabbitmq_load.py")
PYTHON = "/usr/bin/python3"  # Debian's, with python3-pika
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Broker:
    """A private RabbitMQ node: own epmd port, node name, cookie, data directory, AMQP port."""

    def __init__(self, name, erl_args):
        self.dir = tempfile.mkdtemp(prefix="bb-rabbitmq-")
        d = self.dir
        with open(os.path.join(d, ".erlang.cookie"), "w") as f:
            f.write("bbbench%d" % os.getpid())
        os.chmod(os.path.join(d, ".erlang.cookie"), 0o400)
        for fname, text in [("rabbitmq.conf", "loopback_users = none\n"), ("enabled_plugins", "[].\n"),
                            ("rabbitmq-env.conf", "")]:
            with open(os.path.join(d, fname), "w") as f:
                f.write(text)
        self.port = free_port()
        epmd_port = free_port()
        env = dict(os.environ, HOME=d, ERL_EPMD_PORT=str(epmd_port), RABBITMQ_NODENAME="%s%d@localhost" % (name, os.getpid()),
                   RABBITMQ_NODE_IP_ADDRESS="127.0.0.1", RABBITMQ_NODE_PORT=str(self.port),
                   RABBITMQ_DIST_PORT=str(free_port()), RABBITMQ_MNESIA_BASE=d + "/mnesia",
                   RABBITMQ_LOG_BASE=d + "/log", RABBITMQ_CONFIG_FILE=d + "/rabbitmq",
                   RABBITMQ_ADVANCED_CONFIG_FILE=d + "/advanced.config",
                   RABBITMQ_ENABLED_PLUGINS_FILE=d + "/enabled_plugins",
                   RABBITMQ_CONF_ENV_FILE=d + "/rabbitmq-env.conf", RUNNING_UNDER_SYSTEMD="true",
                   RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS=erl_args)
        self.epmd = subprocess.Popen(["epmd", "-port", str(epmd_port)])
        self.log = open(os.path.join(d, "app.log"), "w")
        # The script execs the VM: this pid becomes beam.smp's.
        self.vm = subprocess.Popen(["/usr/lib/rabbitmq/bin/rabbitmq-server"], env=env, stdout=self.log,
                                   stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                break
            except OSError:
                if self.vm.poll() is not None or time.monotonic() > deadline:
                    sys.exit("rabbitmq.py: the broker did not start; see " + self.log.name)
                time.sleep(0.2)
        self.pid = self.vm.pid

    def cpu_s(self):
        with open("/proc/%d/stat" % self.pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime

    def close(self):
        for p in (self.vm, self.epmd):
            p.kill()
            p.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


# Per -e alloc run: the share of its profile's words under "[allocation not sampled]" (a heap no
# watchpoint sampled, whose kind had no sample either: words without a stack).
ALLOC_UNSAMPLED = []


def unsampled_share(path):
    words = unsampled = 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip("\n").rpartition(" ")
            if not n.isdigit():
                continue
            words += int(n)
            if stack.endswith("[allocation not sampled]"):
                unsampled += int(n)
    return unsampled / words if words else 1.0


def round_of(broker, config, seconds):
    """One load run under `config`: (messages per second, VM CPU microseconds per message)."""
    tool = None
    if config.startswith("sample") or config == "alloc":
        args = {"sample999": ["-F", "999"], "sample19": ["-F", "19"], "alloc": ["-e", "alloc", "--watchpoints-in-vm"]}[config]
        # -e alloc's profile is kept: the share of its words under named stacks is a result too.
        folded = open(os.path.join(broker.dir, "alloc.folded"), "w") if config == "alloc" else subprocess.DEVNULL
        tool = subprocess.Popen([SAMPLE, *args, "-d", str(seconds + 30), "-t", "5",
                                 *(["--folded"] if config == "alloc" else []), str(broker.pid)],
                                stdout=folded, stderr=subprocess.PIPE, text=True)
        for line in tool.stderr:
            if "attached" in line:
                break
    elif config == "perf_g":
        tool = subprocess.Popen(["perf", "record", "-q", "-g", "-e", "cpu-clock", "-F", "999", "-p", str(broker.pid),
                                 "-o", os.path.join(broker.dir, "perf.data")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # The same pause before every run: the last run's queue is still being deleted, and a run
    # started at once would pay for it.
    time.sleep(2)
    cpu0 = broker.cpu_s()
    out = subprocess.run([PYTHON, LOAD, str(broker.port), str(seconds)], capture_output=True, text=True, timeout=seconds + 60)
    cpu1 = broker.cpu_s()
    if tool:
        tool.send_signal(2)
        tool.communicate(timeout=60)
    if config == "alloc":
        folded.close()
        ALLOC_UNSAMPLED.append(unsampled_share(folded.name))
    done = [l for l in out.stdout.splitlines() if l.startswith("done")]
    if not done:
        sys.exit("rabbitmq.py: the load failed: " + out.stdout + out.stderr)
    _, sent, received, rate = done[0].split()
    return float(rate), 1e6 * (cpu1 - cpu0) / max(1, int(received))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=int, default=10, help="load per configuration and round")
    ap.add_argument("--json")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("rabbitmq.py: run as root (BPF, perf)")
    groups = [("bbbench", "", ["none", "sample999", "sample19", "alloc"]),
              ("bbbenchfp", "+JPperf true", ["none", "perf_g"])]
    results = {}
    for name, erl_args, configs in groups:
        broker = Broker(name, erl_args)
        try:
            round_of(broker, "none", 3)  # warm-up: queues, code loaded, JIT
            for r in range(a.rounds):
                order = configs[:]
                random.shuffle(order)
                got = {c: round_of(broker, c, a.seconds) for c in order}
                for c in configs:
                    key = c if erl_args == "" else ("fp_" + c)
                    rate, cpu = got[c]
                    results.setdefault(key, []).append({"rate": rate, "cpu_us_per_msg": cpu,
                                                        "rate_ratio": rate / got["none"][0],
                                                        "cpu_ratio": cpu / got["none"][1]})
                print("round %d %s: %s" % (r + 1, name, ", ".join("%s %.0f msg/s %.1f us/msg" % (c, *got[c]) for c in configs)),
                      file=sys.stderr)
        finally:
            broker.close()

    def spread(xs):
        return "%.3f (%.3f..%.3f)" % (statistics.median(xs), min(xs), max(xs))
    print("RabbitMQ 3.10.8 (Debian, OTP 25), %d rounds of %d s per configuration, alternated" % (a.rounds, a.seconds))
    print("%-28s %12s %10s  %-26s %-26s" % ("configuration", "msg/s", "us/msg", "throughput ratio", "VM CPU per msg ratio"))
    labels = {"none": "no profiler", "sample999": "beam-bpf-sample 999 Hz", "sample19": "beam-bpf-sample 19 Hz",
              "alloc": "beam-bpf-sample -e alloc", "fp_none": "+JPperf true, no profiler",
              "fp_perf_g": "+JPperf true, perf record -g"}
    for key, rows in results.items():
        print("%-28s %12.0f %10.1f  %-26s %-26s" % (labels[key], statistics.median(r["rate"] for r in rows),
                                                  statistics.median(r["cpu_us_per_msg"] for r in rows),
                                                  spread([r["rate_ratio"] for r in rows]),
                                                  spread([r["cpu_ratio"] for r in rows])))
    if ALLOC_UNSAMPLED:
        print("beam-bpf-sample -e alloc: words under named stacks %.1f%% (median of %d runs; lowest %.1f%%)"
              % (100 * (1 - statistics.median(ALLOC_UNSAMPLED)), len(ALLOC_UNSAMPLED), 100 * (1 - max(ALLOC_UNSAMPLED))))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rounds": a.rounds, "seconds": a.seconds, "results": results,
                       "alloc_unsampled": ALLOC_UNSAMPLED}, f, indent=1)


if __name__ == "__main__":
    main()
