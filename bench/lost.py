#!/usr/bin/env python3
"""Section 3 of scripts/bench.sh: lost records. beam-bpf-sample -F 9999 (with --stats) on a VM
busy on every CPU (bench_work `spin`); the figures are the BPF program's `dropped` and `emitted`
counters, and the tool's own CPU time per record.
"""
import os

from lib import log, verdict

KEYS = ("seen", "emitted", "dropped", "records", "truncated")


def run(r):
    R = r.R
    log(f"3. lost records: -F 9999 for {r.lost_s}s on a VM busy on every CPU")
    with r.section("lost"):  # its lost.seconds is the section's, as in every section
        with r.vm("bench_work:main(spin, 0)") as vm:
            st, _ = r.bench.run("beam-bpf-sample", ["-F", "9999", "-d", str(r.lost_s), "-o", os.devnull, str(vm.pid)],
                                timeout=r.lost_s + 120)
            vm.quit(5)
        R.update({f"lost.{k}": st[k] for k in KEYS})
        R["lost.samples_per_s"] = st["seen"] / st["seconds"]
        r.stats_run("lost", st)
        cpu_s = st["user_cpu_s"] + st["sys_cpu_s"]
        R["lost.records_per_cpu_s"] = st["records"] / cpu_s
        R["lost.tool_cpu_pct_of_one"] = 100 * cpu_s / st["seconds"]
    log(f"  {R['lost.emitted']} emitted, {R['lost.dropped']} dropped")


def report(r):
    R = r.R
    R["verdict.lost"] = verdict(R["lost.dropped"] == 0)
    lines = [f"3. Lost records: -F 9999, {r.lost_s} s, VM busy on every CPU (others used "
             f"{R['lost.others_cpu_pct']:.1f}%): seen {R['lost.seen']} ({R['lost.samples_per_s']:.0f}/s), "
             f"emitted {R['lost.emitted']}, dropped {R['lost.dropped']}",
             f"   tool CPU: {R['lost.user_cpu_s']} s user + {R['lost.sys_cpu_s']} s sys "
             f"({R['lost.tool_cpu_pct_of_one']:.1f}% of one CPU) = {R['lost.records_per_cpu_s']:.0f} records per "
             "CPU second"]
    targets = [(f"lost records, -F 9999 {r.lost_s}s busy VM", f"{R['lost.dropped']} of {R['lost.seen']}", "0",
                R["verdict.lost"])]
    return lines, targets


if __name__ == "__main__":
    import main
    main.main(sections="3")
