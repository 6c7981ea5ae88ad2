#!/usr/bin/env python3
# med.py JSONL: per build, median (min-max) of each workload's ops/s and ratio to echo-sync
import json, sys, statistics, collections
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]):
    r = json.loads(l)
    rows[r["ab_bin"]][r["workload"]].append((r["iops"], r.get("extra",{}).get("fraction_of_echo_sync", 1.0)))
for b, ws in rows.items():
    print(b)
    for w, v in ws.items():
        if w == "echo-pipelined": continue
        ops = [x[0] for x in v]; fr = [x[1] for x in v]
        print(f"  {w:32} n={len(v)} ops {statistics.median(ops)/1e3:6.1f}K ({min(ops)/1e3:.1f}-{max(ops)/1e3:.1f})  ratio {statistics.median(fr):.3f} ({min(fr):.2f}-{max(fr):.2f})")
