#!/usr/bin/env python3
"""Summarises call-a.sh's output folder: per build and round, each slice workload's rate and
longest request, each mdtest phase's rate, fraction of echo-sync and longest operation, and
the servers' longest checkpoint (their `worker stopped` lines)."""
import glob
import json
import os
import re
import sys

out = sys.argv[1]
print("== peakfs-slice-bench --files 1000000 (one slice, no network)")
print(f"{'run':14} {'workload':14} {'Kops/s':>8} {'p99.9 us':>9} {'max ms':>8} {'ckpts':>5}")
for f in sorted(glob.glob(os.path.join(out, "slice-*.jsonl"))):
    run = os.path.basename(f)[6:-6]
    for line in open(f):
        r = json.loads(line)
        lat = r["latency_us"]
        print(f"{run:14} {r['workload']:14} {r['iops'] / 1e3:8.1f} {lat['p999']:9.1f} "
              f"{lat['max'] / 1e3:8.1f} {r['extra']['checkpoints']:5}")
print()
print("== peakfs bench --procs 8 --files 250000, 8 servers x 1 worker")
print(f"{'run':10} {'phase':30} {'Kops/s':>8} {'/echo':>6} {'max ms':>8}")
for f in sorted(glob.glob(os.path.join(out, "md-*.jsonl"))):
    run = os.path.basename(f)[3:-6]
    recs = [json.loads(line) for line in open(f) if line.startswith("{")]
    echo = next((r["iops"] for r in recs if r["workload"] == "echo-sync"), None)
    for r in recs:
        w = r["workload"]
        if not w.startswith("mdtest") and w not in ("echo-sync", "echo-spread"):
            continue
        lat = r.get("latency_us") or {}
        mx = f"{lat['max'] / 1e3:8.1f}" if "max" in lat else f"{'-':>8}"
        frac = r["iops"] / echo if echo else float("nan")
        print(f"{run:10} {w:30} {r['iops'] / 1e3:8.1f} {frac:6.3f} {mx}")
    ckpt = []
    for log in glob.glob(os.path.join(out, f"md-{run}.logs", "s*.log")):
        for line in open(log, errors="replace"):
            m = re.search(r"checkpoint_max_us=(\d+).*?checkpoint_ms=([\d.]+)", line)
            if m and "worker stopped" in line:
                ckpt.append((int(m.group(1)), float(m.group(2))))
    if ckpt:
        print(f"{run:10} servers' longest checkpoint {max(c[0] for c in ckpt) / 1e3:.1f} ms, "
              f"median of workers {sorted(c[0] for c in ckpt)[len(ckpt) // 2] / 1e3:.1f} ms, "
              f"all checkpoints {sum(c[1] for c in ckpt):.0f} ms")
    print()
