#!/usr/bin/env python3
# Summary of call-a.sh's runs, files named SIZE-LAYOUT-ROUND.jsonl: per size, phase and
# layout, the median fraction of echo-sync of the same run, its range, and the median ops/s.
import json, glob, statistics as st, collections, sys
frac = collections.defaultdict(list); ops = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1])):
    size, layout, _ = f.rsplit("/", 1)[-1][:-6].split("-")
    for line in open(f):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if "fraction_of_echo_sync" in r["extra"]:
            key = (size, r["workload"], layout)
            frac[key].append(r["extra"]["fraction_of_echo_sync"]); ops[key].append(r["iops"])
for key in sorted(frac):
    v = frac[key]
    print(f"{key[0]:5s} {key[1]:30s} {key[2]} {st.median(v):.3f} [{min(v):.3f}-{max(v):.3f}] n={len(v)}  Kops/s {st.median(ops[key])/1e3:.0f}")
