#!/usr/bin/env bash
# Call P: `peakfs bench --local-cluster 4 --local-workers 2 --local-pin` (servers on cores 0-7,
# the 8 bench processes on 8-15): the best layout of calls M/N with one command, twice.
set -u
O=${1:?}; B=gpu-run/h/lc
nproc; date -u
for i in $(seq ${RUNS:-2}); do
  $B/peakfs bench --local-cluster 4 --local-workers 2 --local-pin --local-data-mib 2048 --procs 8 \
    --files 10000 --only create-empty --only stat-empty --json > $O/p$i.jsonl 2> $O/p$i.err || { echo FAILED; tail -3 $O/p$i.err; }
  [ -n "${QUIET:-}" ] || python3 - $O/p$i.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l); f = r.get("extra", {}).get("fraction_of_echo_sync")
        print(f"{r['workload']:32} {r['iops']:10.0f} ops/s  {f:.3f}")
PY
done
python3 - $O <<'PY'
import glob, json, statistics, sys
runs = {}
for f in sorted(glob.glob(sys.argv[1] + "/p*.jsonl")):
    for l in open(f):
        if l.startswith("{"):
            r = json.loads(l); runs.setdefault(r["workload"], []).append(r["extra"].get("fraction_of_echo_sync", 0) if r["workload"] != "echo-sync" else r["iops"])
for w, v in runs.items():
    print(f"MEDIAN {w:32} {statistics.median(v):10.3f}  ({min(v):.3f}-{max(v):.3f}, {len(v)} runs)")
PY
ls /dev/shm | grep -c peakfs-local || true
date -u
