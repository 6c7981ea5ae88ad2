#!/usr/bin/env bash
# Call G: the final build (f, ea9fdec) against g = f with client i on thread i mod T and at home
# on server (i / T) mod servers (the same balance, permuted), alternating, 4x2 pinned.
set -u
O=${1:?}; BUILDS=${BUILDS:-r t u}
nproc; date -u
for i in $(seq ${RUNS:-6}); do
  for b in $BUILDS; do
    echo -n "$b: "
    gpu-run/$b/peakfs bench --local-cluster 4 --local-workers 2 --local-pin --local-data-mib 2048 --procs 8 \
      --files 10000 --only create-empty --only stat-empty --only remove-empty --json > $O/$b$i.jsonl 2> $O/$b$i.err || { echo FAILED; tail -3 $O/$b$i.err; }
    python3 gpu-run/g/line.py $O/$b$i.jsonl
  done
done
python3 - $O $BUILDS <<'PY'
import glob, json, statistics, sys
for b in sys.argv[2:]:
    runs = {}
    for f in sorted(glob.glob(f"{sys.argv[1]}/{b}[0-9]*.jsonl")):
        for l in open(f):
            if l.startswith("{"):
                r = json.loads(l); w = r["workload"]
                runs.setdefault(w, []).append(r["iops"] if w == "echo-sync" else r["extra"].get("fraction_of_echo_sync", 0))
    for w, v in runs.items():
        if w != "echo-pipelined":
            print(f"{b} MEDIAN {w:32} {statistics.median(v):10.3f}  ({min(v):.3f}-{max(v):.3f}, {len(v)} runs)")
PY
date -u
