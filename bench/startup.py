#!/usr/bin/env python3
"""Section 5 of scripts/bench.sh: start-up (launch to the first record) and peak RSS of the tool,
from every --stats run of sections 2 to 4 (there is nothing to report without them).
"""
from lib import verdict


def report(r):
    R = r.R
    if not r.stats_runs:
        return [], []
    worst_start = max(R[f"{k}.first_record_s"] for k in r.stats_runs)
    worst_rss = max(R[f"{k}.peak_rss_kib"] for k in r.stats_runs)
    R["startup.worst_first_record_s"], R["memory.worst_peak_rss_kib"] = worst_start, worst_rss
    R["verdict.startup"] = verdict(worst_start < 0.5)
    R["verdict.rss"] = verdict(worst_rss < 65536)
    lines = ["5. Start-up (launch to first record) and peak RSS, every --stats run"]
    for k in r.stats_runs:
        lines.append(f"   {k:<22} first record {R[k + '.first_record_s']:.3f} s, "
                     f"peak RSS {R[k + '.peak_rss_kib'] / 1024:6.1f} MiB, {R[k + '.jit_modules']} JIT modules")
    targets = [("start-up to first record (worst)", f"{worst_start:.3f} s", "< 0.5 s", R["verdict.startup"]),
               ("peak RSS of the tool (worst)", f"{worst_rss / 1024:.1f} MiB", "< 64 MiB", R["verdict.rss"])]
    return lines, targets


if __name__ == "__main__":
    import main
    main.main(sections="2,3,4")
