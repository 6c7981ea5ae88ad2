#!/usr/bin/env python3
# Summary of call-e.sh's runs (a runs.tgz unpacked in ARGV[1]): per run kind (`forty`,
# `ten`), build and phase, the median over the rounds of the fraction of echo-sync and of
# the p99.9 latency; and per build the median over runs of the workers' summed stalls
# (rounds of log work over 50 us, settle and pump, from the stop lines).
import glob, json, re, statistics as st, collections, sys, os
d = sys.argv[1]
frac = collections.defaultdict(list); p999 = collections.defaultdict(list)
stall = collections.defaultdict(list)
for f in sorted(glob.glob(f"{d}/*.jsonl")):
    name, build = os.path.basename(f)[:-6].split("-", 1)
    kind = name.rstrip("0123456789")
    for line in open(f):
        if line.startswith("{"):
            r = json.loads(line)
            if r["workload"].startswith("mdtest"):
                k = (kind, r["workload"], build)
                frac[k].append(r["extra"]["fraction_of_echo_sync"])
                p999[k].append(r["latency_us"]["p999"])
    sums = [0.0, 0.0]
    for log in glob.glob(f"{d}/{name}-{build}-logs/s*.log"):
        for line in open(log):
            for i, key in enumerate(("settle", "pump")):
                m = re.search(key + r'_max_us_ms_stalls_ms="[0-9.]+/[0-9.]+/[0-9]+/([0-9.]+)"', line)
                if m:
                    sums[i] += float(m.group(1))
    stall[(kind, build)].append(sums)
for k in sorted(frac):
    v = frac[k]
    print(f"{k[0]:6s} {k[1]:28s} {k[2]:7s} fraction {st.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]"
          f"  p99.9 {st.median(p999[k]):7.1f} us  n={len(v)}")
for k in sorted(stall):
    s = stall[k]
    print(f"{k[0]:6s} {k[1]:7s} stalls of 8 workers, ms: settle {st.median(x[0] for x in s):.1f}"
          f"  pump {st.median(x[1] for x in s):.1f}  (n={len(s)})")
