#!/usr/bin/env python3
# Summary of call-a.sh's runs, files named sSTRIDE-LAYOUT-PROCS-ROUND.jsonl: per stride, phase,
# layout and process count, the median of the runs' fractions of echo-sync (each already the
# median of its paired iterations), their range, and the median ops/s.
import json, glob, statistics as st, collections, sys
frac = collections.defaultdict(list); ops = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1])):
    stride, layout, procs, _ = f.rsplit("/", 1)[-1][:-6].split("-")
    for line in open(f):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        x = r["extra"]
        key = (stride, r["workload"], layout, int(procs))
        if "fraction_of_echo_sync" in x:
            frac[key].append(x["fraction_of_echo_sync"]); ops[key].append(r["iops"])
        elif r["workload"] == "echo-sync":
            frac[key].append(1.0); ops[key].append(r["iops"])
for key in sorted(frac):
    v = frac[key]
    print(f"{key[0]:3s} {key[1]:30s} {key[2]} {key[3]:2d} {st.median(v):.3f} [{min(v):.3f}-{max(v):.3f}] n={len(v)}  Kops/s {st.median(ops[key])/1e3:.0f}")
