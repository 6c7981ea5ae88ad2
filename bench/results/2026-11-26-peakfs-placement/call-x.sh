#!/usr/bin/env bash
# Call X: does the file controller's idle back-off (2,000 spins, then 18,000 yields, then 20 us
# sleeps) get in the way? Same build (current tree + an env knob, not committed): default
# against X_IDLE_YIELDS=2200 (200 yields), alternating, 4x2 pinned, 8 processes.
set -u
O=${1:?}
nproc; date -u
for i in $(seq ${RUNS:-8}); do
  for b in dflt short; do
    echo -n "$b: "
    if [ $b = short ]; then export X_IDLE_YIELDS=2200; else unset X_IDLE_YIELDS; fi
    gpu-run/x/peakfs bench --local-cluster 4 --local-workers 2 --local-pin --local-data-mib 2048 --procs 8 \
      --files 10000 --only create-empty --only stat-empty --only remove-empty --json > $O/$b$i.jsonl 2> $O/$b$i.err || { echo FAILED; tail -3 $O/$b$i.err; }
    python3 gpu-run/x/line.py $O/$b$i.jsonl
  done
done
unset X_IDLE_YIELDS
python3 - $O dflt short <<'PY'
import glob, json, statistics, sys
for b in sys.argv[2:]:
    runs = {}; abs_ = {}
    for f in sorted(glob.glob(f"{sys.argv[1]}/{b}[0-9]*.jsonl")):
        for l in open(f):
            if l.startswith("{"):
                r = json.loads(l); w = r["workload"]
                runs.setdefault(w, []).append(r["iops"] if w == "echo-sync" else r["extra"].get("fraction_of_echo_sync", 0))
                abs_.setdefault(w, []).append(r["iops"] / 1e3)
    for w, v in runs.items():
        if w != "echo-pipelined":
            print(f"{b} MEDIAN {w:32} {statistics.median(v):10.3f}  ({min(v):.3f}-{max(v):.3f}, {len(v)} runs)  {statistics.median(abs_[w]):.0f}K ops/s")
PY
date -u
