#!/usr/bin/env bash
# Call B2: three ways on one host, 4x2 pinned empty-file phases, alternating: b0 (2ba6786),
# wb (write-behind), a1 with PEAKFS_DIRTY_RATIO=0.9 (2ba6786 + knob: no write-back at all during
# the phases, the upper bound of what taking write-backs off the request path can give).
set -u
O=${1:?}; nproc; date -u
for i in $(seq ${RUNS:-8}); do for b in b0 wb a1; do
  if [ $b = a1 ]; then export PEAKFS_DIRTY_RATIO=0.9; else unset PEAKFS_DIRTY_RATIO; fi
  gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 2048 \
    --only create-empty --only stat-empty --only remove-empty --json > $O/$b-a$i.jsonl 2> $O/$b-a$i.err || { echo FAILED; tail -3 $O/$b-a$i.err; }
  echo -n "$b-a$i: "; python3 gpu-run/wb/line.py $O/$b-a$i.jsonl
done; done
python3 - $O <<'PY'
import glob, json, statistics, sys
for b in ["b0", "wb", "a1"]:
    runs = {}
    for f in sorted(glob.glob(f"{sys.argv[1]}/{b}-a[0-9]*.jsonl")):
        for l in open(f):
            if l.startswith("{"):
                r = json.loads(l); w = r["workload"]
                runs.setdefault(w, []).append(r["iops"] if w == "echo-sync" else r["extra"].get("fraction_of_echo_sync", 0))
    for w, v in runs.items():
        if w != "echo-pipelined":
            print(f"{b} MEDIAN {w:32} {statistics.median(v):10.3f}  ({min(v):.3f}-{max(v):.3f}, {len(v)} runs)")
PY
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
