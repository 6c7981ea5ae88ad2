#!/usr/bin/env bash
# Call S2: the file controller's idle sleeps (20 us a round, ~15 K wake-ups a second per
# server) against 200 us, same build (z + an env knob, not committed), alternating: metadata
# 4x2 pinned, 8 processes; then IOR 256 MiB per process.
set -u
O=${1:?}
nproc; date -u
run() { if [ $1 = s200 ]; then export X_IDLE_SLEEP_US=200; else unset X_IDLE_SLEEP_US; fi; }
for i in $(seq ${RUNS:-6}); do
  for b in s20 s200; do
    run $b; echo -n "$b: "
    gpu-run/s2/peakfs bench --local-cluster 4 --local-workers 2 --local-pin --local-data-mib 2048 --procs 8 \
      --files 10000 --only create-empty --only stat-empty --only remove-empty --json > $O/$b-$i.jsonl 2> $O/$b-$i.err || { echo FAILED; tail -3 $O/$b-$i.err; }
    python3 gpu-run/s2/line.py $O/$b-$i.jsonl
  done
done
for i in $(seq ${IOR_RUNS:-3}); do
  for b in s20 s200; do
    run $b
    gpu-run/s2/peakfs bench --local-cluster 4 --local-workers 2 --local-pin --local-data-mib 4096 --procs 8 \
      --files 10 --echo-ops 1000 --ior-mib 256 --only ior-nn --only ior-n1 --json > $O/ior-$b-$i.jsonl 2> $O/ior-$b-$i.err || { echo FAILED; tail -3 $O/ior-$b-$i.err; }
    python3 - $b $i $O/ior-$b-$i.jsonl <<'PY'
import json, sys
cells = [f"{r['workload']} {r['bytes'] / r['duration_s'] / 1e9:.2f}" for r in map(json.loads, filter(lambda l: l.startswith("{"), open(sys.argv[3]))) if r["workload"].startswith("ior")]
print(f"ior {sys.argv[1]} round {sys.argv[2]}: " + "  ".join(cells) + " GB/s")
PY
  done
done
unset X_IDLE_SLEEP_US
python3 - $O s20 s200 <<'PY'
import glob, json, statistics, sys
for b in sys.argv[2:]:
    runs = {}; abs_ = {}
    for f in sorted(glob.glob(f"{sys.argv[1]}/{b}-[0-9]*.jsonl")):
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
