#!/usr/bin/env bash
# Call A1: icache write-back stalls. Same build; CFG d = dirty ratio 0.05 (default), r9 = 0.9
# (no write-back during the bench). Each write-back's time goes to /tmp/wb.log (experiment build).
set -u
O=${1:?}; nproc; date -u
for i in $(seq ${RUNS:-6}); do
  for c in d r9; do
    rm -f /tmp/wb.log
    if [ $c = r9 ]; then export PEAKFS_DIRTY_RATIO=0.9; else unset PEAKFS_DIRTY_RATIO; fi
    echo -n "$c: "
    gpu-run/a1/peakfs bench --local-cluster 4 --local-workers 2 --local-pin --local-data-mib 2048 --procs 8 \
      --files 10000 --only create-empty --only stat-empty --only remove-empty --json > $O/$c$i.jsonl 2> $O/$c$i.err || { echo FAILED; tail -3 $O/$c$i.err; }
    python3 gpu-run/a1/line.py $O/$c$i.jsonl
    [ -f /tmp/wb.log ] && awk '{split($2,n,"=");split($3,a,"=");split($4,b,"=");k+=n[2];s+=a[2];t+=b[2];c++; if (b[2]>m) m=b[2]} END {printf "   WB %d batches, %d blocks, sync %d us, total %d us, max %d us\n", c,k,s,t,m}' /tmp/wb.log
  done
done
python3 - $O d r9 <<'PY'
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
