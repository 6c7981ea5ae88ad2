#!/usr/bin/env bash
# Call S: layouts with the home-slice build: 4 servers x 2 workers against 8 servers x 1 worker
# (no forwarding at all), both pinned (servers on cores 0-7, 8 processes on 8-15), alternating.
set -u
O=${1:?}; B=gpu-run/r
nproc; date -u
for i in $(seq ${RUNS:-6}); do
  for l in 4x2 8x1; do
    echo -n "$l: "
    $B/peakfs bench --local-cluster ${l%x*} --local-workers ${l#*x} --local-pin --local-data-mib $((8192 / ${l%x*})) --procs 8 \
      --files 10000 --only create-empty --only stat-empty --only remove-empty --json > $O/s$l-$i.jsonl 2> $O/s$l-$i.err || { echo FAILED; tail -3 $O/s$l-$i.err; }
    python3 $B/line.py $O/s$l-$i.jsonl
  done
done
python3 - $O <<'PY'
import glob, json, statistics, sys
for l in ["4x2", "8x1"]:
    runs = {}
    for f in sorted(glob.glob(f"{sys.argv[1]}/s{l}-*.jsonl")):
        for ln in open(f):
            if ln.startswith("{"):
                r = json.loads(ln); w = r["workload"]
                runs.setdefault(w, []).append(r["iops"] if w == "echo-sync" else r["extra"].get("fraction_of_echo_sync", 0))
    for w, v in runs.items():
        print(f"{l} MEDIAN {w:32} {statistics.median(v):10.3f}  ({min(v):.3f}-{max(v):.3f}, {len(v)} runs)")
PY
date -u
