#!/usr/bin/env bash
# Call F3: IOR only (256 MiB per process, 8 processes, 4x2 pinned), b0 (2ba6786) against fin,
# alternating, 6 rounds: do reads lose with two host queues per worker?
set -u
O=${1:?}; nproc; date -u
for i in $(seq ${RUNS:-6}); do for b in b0 fin; do
  gpu-run/$b/peakfs bench --local-pin --procs 8 --files 1000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --ior-mib 256 \
    --only ior-nn-write --only ior-nn-read --only ior-n1-write --only ior-n1-read --json > $O/$b-$i.jsonl 2> $O/$b-$i.err || { echo FAILED; tail -3 $O/$b-$i.err; }
  python3 - $O/$b-$i.jsonl $b-$i <<'PY'
import json, sys
out = []
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l)
        if r["workload"].startswith("ior"):
            out.append(f'{r["workload"][4:]} {r["bytes"]/r["duration_s"]/1e9:.2f}')
print(sys.argv[2], " | ".join(out))
PY
done; done
python3 - $O <<'PY'
import glob, json, statistics, sys
for b in ["b0", "fin"]:
    runs = {}
    for f in sorted(glob.glob(f"{sys.argv[1]}/{b}-[0-9]*.jsonl")):
        for l in open(f):
            if l.startswith("{"):
                r = json.loads(l)
                if r["workload"].startswith("ior"):
                    runs.setdefault(r["workload"], []).append(r["bytes"] / r["duration_s"] / 1e9)
    for w, v in runs.items():
        print(f"{b} MEDIAN {w:16} {statistics.median(v):6.2f} GB/s ({min(v):.2f}-{max(v):.2f}, {len(v)} runs)")
PY
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
