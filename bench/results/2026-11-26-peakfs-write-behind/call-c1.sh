#!/usr/bin/env bash
# Call C1: a worker with replies outstanding watches its rings 3 us (rw) instead of 0.5 us
# (rw with PEAKFS_SHORT_WATCH, experiment knob), alternating, 4x2 pinned, empty-file phases.
set -u
O=${1:?}; nproc; date -u
for i in $(seq ${RUNS:-8}); do for b in short long; do
  if [ $b = short ]; then export PEAKFS_SHORT_WATCH=1; else unset PEAKFS_SHORT_WATCH; fi
  gpu-run/rw/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 2048 \
    --only create-empty --only stat-empty --only remove-empty --json > $O/$b-a$i.jsonl 2> $O/$b-a$i.err || { echo FAILED; tail -3 $O/$b-a$i.err; }
  echo -n "$b-a$i: "; python3 gpu-run/rw/line.py $O/$b-a$i.jsonl
done; done
python3 - $O <<'PY'
import glob, json, statistics, sys
for b in ["short", "long"]:
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
