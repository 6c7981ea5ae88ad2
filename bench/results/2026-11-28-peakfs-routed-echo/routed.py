#!/usr/bin/env python3
# Summary of call-a.sh's runs, files named LAYOUT-PROCS-ROUND.jsonl. Per layout and process
# count: each phase's fraction of echo-sync (median of the runs, each the median of its paired
# iterations; range over the runs), its median K ops/s and median per-operation p50 (us),
# then per run the bigdir phases against echo-routed (their fractions' ratio).
import json, glob, statistics as st, collections, sys
frac = collections.defaultdict(list); ops = collections.defaultdict(list)
p50 = collections.defaultdict(list); ratio = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1])):
    layout, procs, _ = f.rsplit("/", 1)[-1][:-6].split("-")
    run = {}
    for line in open(f):
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        w = r["workload"]
        fr = 1.0 if w == "echo-sync" else r["extra"].get("fraction_of_echo_sync")
        if fr is None:
            continue
        key = (layout, int(procs), w)
        frac[key].append(fr); ops[key].append(r["iops"]); run[w] = fr
        if r.get("latency_us"):
            p50[key].append(r["latency_us"]["p50"])
    for w in ("mdtest-create-empty-bigdir", "mdtest-stat-empty-bigdir"):
        if w in run and run.get("echo-routed"):
            ratio[(layout, int(procs), w)].append(run[w] / run["echo-routed"])
for key in sorted(frac):
    v = frac[key]
    lat = f"p50 {st.median(p50[key]):.1f} us" if p50[key] else ""
    print(f"{key[0]:5s} {key[1]:2d} {key[2]:30s} {st.median(v):.3f} [{min(v):.3f}-{max(v):.3f}] n={len(v)}  Kops/s {st.median(ops[key])/1e3:.0f}  {lat}")
print("bigdir / echo-routed (per run):")
for key in sorted(ratio):
    v = ratio[key]
    print(f"{key[0]:5s} {key[1]:2d} {key[2]:30s} {st.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]")
