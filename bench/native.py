#!/usr/bin/env python3
"""What unwinding native frames in the kernel costs per sample, and what its tables cost.

On three VMs (Debian's OTP 25): bb_native `zlib` (a NIF loop: about 6 native frames under the
Erlang ones), bb_native `gc` (the collector: about 5 to 10) and bb_work `deep 100` (100 Erlang
frames, JIT code: no native walk), beam-bpf-sample runs for --seconds with native frames
(the default) and with --native-depth 0 (the native leaf only), interleaved over --rounds. From
the tool's own --stats: BPF handler time per sample (mean), native frames per record, start-up
to the first record, and the unwind tables (rows, files, bytes). The cost of one native frame
is timed in BPF around the native walk (--stats bpf_ns_per_native_frame); the issue's case (30
native + 100 Erlang frames) is estimated from it and the deep-100 VM's time per sample, not
measured: no workload here reaches 30 native frames.

    bench/native.py [--rounds 3] [--seconds 4] [--build DIR] [--json FILE]
"""
import os
import statistics
import tempfile

from lib import Bench, Vm, arg_parser, compile_workloads, require_root, write_json


def main():
    ap = arg_parser(__doc__, "bench-native.json")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4)
    a = ap.parse_args()
    require_root("native.py")
    bench = Bench(a.build)

    def run_tool(pid, seconds, extra):
        return bench.run("beam-bpf-sample", ["-d", str(seconds), "-o", os.devnull, *extra, str(pid)], timeout=120)[0]

    result = {}
    with tempfile.TemporaryDirectory() as beams:
        compile_workloads(beams, ("bb_native", "bb_work"))
        for name, expr in (("zlib", "bb_native:main(zlib)"), ("gc", "bb_native:main(gc)"),
                           ("deep100", "bb_work:main(deep, 100)")):
            vm = Vm(beams, expr)
            try:
                runs = {"native": [], "leaf_only": []}
                for r in range(a.rounds):
                    order = ["native", "leaf_only"] if r % 2 == 0 else ["leaf_only", "native"]
                    for c in order:
                        runs[c].append(run_tool(vm.pid, a.seconds, [] if c == "native" else ["--native-depth", "0"]))
            finally:
                vm.p.stdin.write("quit\n")
                vm.p.stdin.flush()
                vm.p.wait(timeout=30)
            def med(c, key):
                return statistics.median(s[key] for s in runs[c])
            frames = statistics.median(s["native_frames"] / max(1, s["records"]) for s in runs["native"])
            res = {
                "walk_ns_native": med("native", "bpf_walk_ns_mean"),
                "walk_ns_leaf_only": med("leaf_only", "bpf_walk_ns_mean"),
                "native_frames_per_record": frames,
                "native_unwind_stopped_share": statistics.median(
                    s["native_unwind_stopped"] / max(1, s["records"]) for s in runs["native"]),
                "first_record_s_native": med("native", "first_record_s"),
                "first_record_s_leaf_only": med("leaf_only", "first_record_s"),
                "unwind_rows": runs["native"][0]["unwind_rows"],
                "unwind_files": runs["native"][0]["unwind_files"],
                "unwind_table_bytes": runs["native"][0]["unwind_table_bytes"],
                "peak_rss_kib_native": med("native", "peak_rss_kib"),
                "peak_rss_kib_leaf_only": med("leaf_only", "peak_rss_kib"),
            }
            if frames >= 1:
                # Timed in BPF around the native walk alone (--stats bpf_ns_per_native_frame).
                res["ns_per_native_frame"] = med("native", "bpf_ns_per_native_frame")
            result[name] = res
            print(f"{name}: {res['walk_ns_native']:.0f} ns per sample with native frames "
                  f"({frames:.1f} per record, {100 * res['native_unwind_stopped_share']:.1f}% stopped short), "
                  f"{res['walk_ns_leaf_only']:.0f} ns with the leaf only"
                  + (f"; {res['ns_per_native_frame']:.0f} ns per native frame" if "ns_per_native_frame" in res else "")
                  + f"; first record {res['first_record_s_native']:.2f} s (leaf only {res['first_record_s_leaf_only']:.2f} s)"
                  + f"; unwind tables {res['unwind_rows']} rows of {res['unwind_files']} files, "
                  f"{res['unwind_table_bytes'] / 1024:.0f} KiB", flush=True)
    per_frame = [r["ns_per_native_frame"] for r in result.values() if "ns_per_native_frame" in r]
    if per_frame and "deep100" in result:
        est = result["deep100"]["walk_ns_native"] + 30 * max(per_frame)
        result["estimate_30_native_100_erlang_ns"] = est
        print(f"estimate for 30 native + 100 Erlang frames: {est:.0f} ns per sample "
              f"(deep-100's {result['deep100']['walk_ns_native']:.0f} ns + 30 x {max(per_frame):.0f} ns); target 2000 ns",
              flush=True)
    write_json(a.json, result)


if __name__ == "__main__":
    main()
