#!/usr/bin/env bash
# Call A: how the bench's process count moves each phase's fraction of echo-sync. Layouts
# 8 servers x 1 worker, 4 x 2 and 1 x 8 on cores 0-7; 8, 16 or 24 bench processes sharing
# cores 8-15 (--local-pin); empty files, --iterations 3; ROUNDS rounds, the order of the
# nine settings rotating each round. Then stride-1 runs (mdtest's -N 1: no process stats or
# removes its own files) of 8 x 1 and 1 x 8 with 8 and 16 processes, SROUNDS rounds.
# Usage: call-a.sh OUT
set -u
O=${1:?}; G=${G:-gpu-run/sweep}; B=${B:-head}; mkdir -p $O; nproc; date -u
md() { # layout procs round stride
  local c=${1%x*} w=${1#*x} p=$2 i=$3 s=$4
  local f=$O/s$s-$1-$p-$i
  RUST_LOG=info timeout 200 $G/$B/peakfs bench --local-pin --procs $p --files 10000 --iterations 3 --stride $s --local-cluster $c --local-workers $w --local-data-mib $((4096 * 8 / c)) --only create-empty --only stat-empty --only remove-empty --local-logs $O/logs-s$s-$1-$p-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
S=(8x1:8 4x2:8 1x8:8 8x1:16 4x2:16 1x8:16 8x1:24 4x2:24 1x8:24)
for i in $(seq 1 ${ROUNDS:-2}); do
  for k in $(seq 0 8); do e=${S[$(( (k + 4 * i) % 9 ))]}; md ${e%:*} ${e#*:} $i 0; done
done
for i in $(seq 1 ${SROUNDS:-2}); do
  for e in 8x1:8 1x8:16 8x1:16 1x8:8; do md ${e%:*} ${e#*:} $i 1; done
done
python3 bench/results/2026-11-27-peakfs-procs/procs.py "$O/*.jsonl" | tee $O/summary.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
