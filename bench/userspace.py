#!/usr/bin/env python3
"""Section 4 of scripts/bench.sh: user space, records symbolized and aggregated per second on
one core. On a VM with ~100 loaded modules and one with ~2,000 (bench_work `modules`, whose
stacks run through all of them): the tool as shipped at 9,999 Hz (records per CPU second of the
whole process, start-up and RSS), then beam-bpf-userspace-bench, which collects real records,
stops the VM and replays them through Symbolizer::frames and Aggregator::add, and times reading
the JIT symbol index.
"""
import json
import os
import subprocess

from lib import log, verdict

MODULES = (10, 1900)  # generated modules, on top of the ~100 of a bare VM
FIELDS = (  # what is kept of beam-bpf-userspace-bench's JSON, by part
    ("jit_index", ("modules", "ranges", "cold_refresh_ms", "warm_refresh_ms_median", "warm_refresh_ms_max")),
    ("collect", ("records", "dropped", "bpf_frames_per_record_mean")),
    ("replay", ("symbolizer_init_ms", "frames_per_stack_mean", "unique_stacks", "locations", "unsymbolized_frames",
                "first_pass_records_per_s", "steady_records_per_s", "steady_pass_records_per_s_median",
                "steady_ns_per_record")))


def one_vm(r, g):
    R, key, mods = r.R, f"us.{g}", os.path.join(r.tmp, f"mods{g}")
    out = os.path.join(r.tmp, key + ".json")
    with r.vm(f'bench_work:main(modules, {{"{mods}", {g}}})') as vm:
        R[f"{key}.vm_modules"] = int(vm.ready_line.split()[1])
        # The tool as shipped, at a high rate: records per CPU second of the whole process (sys
        # includes draining the ring buffer), start-up and RSS with this many modules.
        st, _ = r.bench.run("beam-bpf-sample", ["-F", "9999", "-d", str(r.us_s), "-o", os.devnull, str(vm.pid)],
                            timeout=r.us_s + 120)
        r.stats_run(f"{key}.sample", st)
        R[f"{key}.sample.records"] = st["records"]
        R[f"{key}.sample.records_per_cpu_s"] = st["records"] / (st["user_cpu_s"] + st["sys_cpu_s"])
        # The replay bench (it stops the VM while it replays).
        b = subprocess.run([r.bench.tool("beam-bpf-userspace-bench"), str(vm.pid), "--seconds", str(r.us_s),
                            "--passes", str(r.us_passes), "--json", out], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True)
        if b.returncode:
            raise SystemExit(f"bench: beam-bpf-userspace-bench failed: {b.stderr.strip()}")
        vm.quit(5)
    j = json.load(open(out))
    R.update({f"{key}.{k}": j[part][k] for part, keys in FIELDS for k in keys})
    log(f"  {g} generated modules ({R[f'{key}.modules']} in the JIT index): "
        f"{R[f'{key}.steady_records_per_s'] / 1e6:.6g} M records/s")


def run(r):
    log("4. user space: VMs with ~100 and ~2,000 modules")
    with r.section("us"):
        for g in MODULES:  # compiled in a VM of their own, so that the profiled VM does not load the compiler
            subprocess.run(["erl", "-noshell", "-pa", r.ebin, "-eval",
                            f'bench_work:gen_modules("{r.tmp}/mods{g}", {g}), halt().'], check=True)
        for g in MODULES:
            one_vm(r, g)


def report(r):
    R = r.R
    row = "   {:<9} {:<8} {:<8} {:<11} {:<10} {:<11} {:<13} {:<14} {:<16} {}"
    lines = [f"4. User space on one core (beam-bpf-userspace-bench: real records replayed through Symbolizer::frames + "
             f"Aggregator::add, VM stopped; others used {R['us.others_cpu_pct']:.1f}%)",
             row.format("modules", "ranges", "frames", "stacks", "cold pass", "steady", "ns/record", "index read",
                        "index re-read", "beam-bpf-sample -F 9999 (user+sys)")]
    targets = []
    for g in MODULES:
        def us(k):
            return R[f"us.{g}.{k}"]
        R[f"verdict.us_{g}"] = verdict(us("steady_records_per_s") >= 1e6)
        lines.append(row.format(us("modules"), us("ranges"), f"{us('frames_per_stack_mean'):.1f}", us("unique_stacks"),
                                f"{us('first_pass_records_per_s') / 1e6:.2f}M/s",
                                f"{us('steady_records_per_s') / 1e6:.2f}M/s", f"{us('steady_ns_per_record'):.0f}",
                                f"{us('cold_refresh_ms'):.1f} ms", f"{us('warm_refresh_ms_median'):.2f} ms",
                                f"{us('sample.records_per_cpu_s'):.0f} records/CPU-s"))
        targets.append((f"user space, {us('modules')} modules", f"{us('steady_records_per_s') / 1e6:.2f} M records/s",
                        ">= 1 M/s", R[f"verdict.us_{g}"]))
    return lines, targets


if __name__ == "__main__":
    import main
    main.main(sections="4")
