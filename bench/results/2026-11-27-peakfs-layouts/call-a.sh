#!/usr/bin/env bash
# Call A: the same build (gpu-run/lay/head) in four server layouts of the 16 cores' 8 worker
# cores - 8 servers x 1 worker, 4 x 2, 2 x 4, 1 x 8 - with 8 bench processes on the other 8
# cores (--local-pin). Empty-file phases: ROUNDS rounds, the layouts' order rotating each
# round; 3,901-byte phases: 8 x 1 and 1 x 8, SROUNDS rounds, alternating.
# Usage: call-a.sh OUT
set -u
O=${1:?}; G=${G:-gpu-run/lay}; B=${B:-head}; mkdir -p $O; nproc; date -u
md() { # layout round size
  local c=${1%x*} w=${1#*x} i=$2 z=$3
  local f=$O/$z-$1-$i
  RUST_LOG=info timeout 150 $G/$B/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $c --local-workers $w --local-data-mib 4096 --only create-$z --only stat-$z --only remove-$z --local-logs $O/logs-$z-$1-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
L=(8x1 4x2 2x4 1x8)
for i in $(seq 1 ${ROUNDS:-4}); do
  for k in 0 1 2 3; do md ${L[$(( (k + i) % 4 ))]} $i empty; done
done
for i in $(seq 1 ${SROUNDS:-3}); do
  if (( i % 2 )); then o="8x1 1x8"; else o="1x8 8x1"; fi
  for l in $o; do md $l $i 3901; done
done
python3 bench/results/2026-11-27-peakfs-layouts/layouts.py "$O/*.jsonl" | tee $O/summary.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
