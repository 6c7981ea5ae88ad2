#!/usr/bin/env bash
# Call R: home slices (master-numbered clients, HELLO, near dirs on the home slice) against the
# diagnostics-only build of call Q, alternating, 4 servers x 2 workers pinned, 8 processes.
set -u
O=${1:?}
nproc; date -u
for i in $(seq ${RUNS:-8}); do
  for b in q r; do
    echo -n "$b: "
    B=gpu-run/$b
    $B/peakfs bench --local-cluster 4 --local-workers 2 --local-pin --local-data-mib 2048 --procs 8 \
      --files ${FILES:-10000} --only create-empty --only stat-empty --json > $O/$b$i.jsonl 2> $O/$b$i.err || { echo FAILED; tail -3 $O/$b$i.err; }
    python3 gpu-run/r/line.py $O/$b$i.jsonl
  done
done
python3 - $O <<'PY'
import glob, json, statistics, sys
for b in "qr":
    runs = {}
    for f in sorted(glob.glob(f"{sys.argv[1]}/{b}*.jsonl")):
        for l in open(f):
            if l.startswith("{"):
                r = json.loads(l); w = r["workload"]
                runs.setdefault(w, []).append(r["iops"] if w == "echo-sync" else r["extra"].get("fraction_of_echo_sync", 0))
    for w, v in runs.items():
        print(f"{b} MEDIAN {w:32} {statistics.median(v):10.3f}  ({min(v):.3f}-{max(v):.3f}, {len(v)} runs)")
PY
date -u
