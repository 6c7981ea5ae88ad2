#!/usr/bin/env bash
# Call A: echo-routed, the bigdir's dispatch ceiling, beside the bigdir and private phases.
# Settings LAYOUT:PROCS (servers x workers on cores 0..C*W-1, the bench processes on the cores
# after them, --local-pin): 8x1, 4x2 and 1x8 with 8 processes, ROUNDS rounds, their order
# rotating; then 12x1 with 4 processes and 9x1 with 7 (the paper's 0.8 processes per worker
# thread), XROUNDS rounds. Empty files, 10,000 per process, --iterations 3.
# Usage: call-a.sh OUT   (from the repository root; the build in $G/$B)
set -u
O=${1:?}; G=${G:-gpu-run/routed}; B=${B:-head}; mkdir -p $O; nproc; date -u
md() { # layout procs round
  local c=${1%x*} w=${1#*x} p=$2 i=$3
  local f=$O/$1-$p-$i
  RUST_LOG=info timeout 200 $G/$B/peakfs bench --local-pin --procs $p --files 10000 --iterations 3 --local-cluster $c --local-workers $w --local-data-mib $((4096 * 8 / c)) --only create-empty --only stat-empty --local-logs $O/logs-$1-$p-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
S=(8x1:8 4x2:8 1x8:8)
for i in $(seq 1 ${ROUNDS:-3}); do
  for k in 0 1 2; do e=${S[$(( (k + i) % 3 ))]}; md ${e%:*} ${e#*:} $i; done
done
for i in $(seq 1 ${XROUNDS:-2}); do
  for e in 12x1:4 9x1:7; do md ${e%:*} ${e#*:} $i; done
done
python3 bench/results/2026-11-28-peakfs-routed-echo/routed.py "$O/*.jsonl" | tee $O/summary.txt
date -u
cd $O || exit 1
for d in logs-*; do echo "$d"; grep -h "worker stopped" $d/s*.log | grep -o 'forwarded=[0-9]* .*hop_us="[^"]*"' | head -16; done > hops.txt
tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
