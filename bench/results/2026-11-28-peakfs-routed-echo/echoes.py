#!/usr/bin/env python3
# Summary of the echo-only runs of call-b.sh and call-c.sh: for the JSON-line files matching
# the pattern given, each echo phase's fraction of echo-sync (median, then every run), echo-sync's
# K ops/s, and the per-operation p50 of the phases that time each operation.
import json, glob, statistics as st, sys, collections
v = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1])):
    for line in open(f):
        if line.startswith("{"):
            r = json.loads(line); x = r["extra"]
            v[r["workload"]].append(x.get("fraction_of_echo_sync", 1.0))
            if r["workload"] == "echo-sync": v["echo-sync Kops/s"].append(r["iops"] / 1e3)
            if r.get("latency_us"): v[r["workload"] + " p50 us"].append(r["latency_us"]["p50"])
for k in sorted(v): print(f"{k:26s} {st.median(v[k]):.3f} {' '.join(f'{a:.3f}' for a in v[k])}")
