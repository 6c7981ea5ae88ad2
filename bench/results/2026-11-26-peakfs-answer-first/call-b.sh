#!/usr/bin/env bash
# Call B: why a bigdir create trails a bigdir stat. The `diag` build (lean + the workers' stop
# line gives checkpoints, Icache write-backs and misses, and the log work between rounds: total
# and longest). Empty-file phases in the bench's order (private, then bigdir) against the bigdir
# phases alone, 8 x 1 and 4 x 2, and 8 x 1 with 4x the data (a 4x longer WAL).
set -u
O=${1:?}; nproc; date -u
S=bench/results/2026-11-26-peakfs-data-path/summary.py
md() { # tag round cluster workers data-mib only...
  local t=$1 i=$2 c=$3 w=$4 d=$5; shift 5
  local f=$O/$t-diag-$i
  RUST_LOG=info timeout 150 gpu-run/diag/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $c --local-workers $w --local-data-mib $d "$@" --local-logs $O/logs-$t-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  python3 $S $f.jsonl "$t $i"
  grep -h "worker stopped" $O/logs-$t-$i/s*.log | sed -E 's/.*(worker=[0-9]+) (requests=[0-9]+).*(checkpoints=.*)/  \1 \2 \3/'
}
ALL=(--only create-empty --only stat-empty --only remove-empty)
BIG=(--only create-empty-bigdir --only stat-empty-bigdir --only remove-empty-bigdir)
for i in 1 2 3 4 5; do
  md all8x1 $i 8 1 4096 "${ALL[@]}"; md big8x1 $i 8 1 4096 "${BIG[@]}"
  md all4x2 $i 4 2 4096 "${ALL[@]}"; md big4x2 $i 4 2 4096 "${BIG[@]}"
  md all8x1d $i 8 1 16384 "${ALL[@]}"
done > $O/runs.txt
python3 - "$O" <<'PY' > $O/summary.txt
import json,glob,statistics as st,collections,sys
d=collections.defaultdict(lambda: collections.defaultdict(list))
for f in glob.glob(sys.argv[1]+"/*.jsonl"):
    t=f.split("/")[-1].split("-")[0]
    for l in open(f):
        if l.startswith("{"):
            r=json.loads(l); x=r["extra"].get("fraction_of_echo_sync")
            if x is not None: d[t][r["workload"]].append((x,r["iops"]))
for t in sorted(d):
    for w in sorted(d[t]):
        v=d[t][w]; print(f"{t:8s} {w:30s} n={len(v)} median {st.median(a for a,_ in v):.3f}  Kops/s {st.median(b for _,b in v)/1e3:.0f}")
PY
cat $O/summary.txt; grep -c FAILED $O/runs.txt; date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
