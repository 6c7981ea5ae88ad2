#!/usr/bin/env bash
# Call M1: b1 (4f00867) against n1 (two-level block table, unlink in one transaction):
# 4x2 pinned empty-file phases, alternating, 8 rounds; then IOR only, 3 rounds.
set -u
O=${1:?}; nproc; date -u
for i in $(seq ${RUNS:-8}); do for b in b1 n1; do
  gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 2048 \
    --only create-empty --only stat-empty --only remove-empty --json > $O/$b-a$i.jsonl 2> $O/$b-a$i.err || { echo FAILED; tail -3 $O/$b-a$i.err; }
  echo -n "$b-a$i: "; python3 gpu-run/n1/line.py $O/$b-a$i.jsonl
done; done
python3 - $O <<'PY'
import glob, json, statistics, sys
for b in ["b1", "n1"]:
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
for i in $(seq ${IOR_RUNS:-3}); do for b in b1 n1; do
  gpu-run/$b/peakfs bench --local-pin --procs 8 --files 1000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --ior-mib 256 \
    --only ior-nn-write --only ior-nn-read --only ior-n1-write --only ior-n1-read --json > $O/$b-i$i.jsonl 2> $O/$b-i$i.err || { echo FAILED; tail -3 $O/$b-i$i.err; }
  python3 - $O/$b-i$i.jsonl $b-i$i <<'PY'
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
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
