#!/usr/bin/env bash
# Checkpoints at a million inodes per slice and mdtest at 2 M files per phase, build A against
# build B (binaries in gpu-run/ckpt/A and gpu-run/ckpt/B), in the order A B B A.
# Usage: call-a.sh OUT [A B]
# Call A: call-a.sh OUT (old = 6513813: checkpoints in a new buffer each time, cART walked in
# name order; new = d7a2d7c: the buffer kept, cART walked in node order).
# Call B: call-b.sh OUT, which is call-a.sh OUT new steps (steps = 005297f: checkpoints written
# between requests, and the log a megabyte at a time).
set -u
O=${1:?}; mkdir -p "$O"; nproc; date -u
D=gpu-run/ckpt; A=${2:-old}; B=${3:-new}
slice() { # build round
  local f=$O/slice-$1-$2
  timeout 150 $D/$1/peakfs-slice-bench --files 1000000 --rounds 1 --data-mib 8192 \
    --bytes-per-inode 4096 --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
md() { # build round
  local f=$O/md-$1-$2
  mkdir -p $f.logs
  RUST_LOG=info timeout 200 $D/$1/peakfs bench --local-pin --procs 8 --files 250000 \
    --local-cluster 8 --local-workers 1 --local-data-mib 4096 \
    --local-server-arg=--bytes-per-inode=4096 --only create-empty --only stat-empty \
    --only remove-empty --local-logs $f.logs --json > $f.jsonl 2> $f.err \
    || { echo FAILED $f; tail -3 $f.err; }
}
for r in 1 2; do
  if (( r % 2 )); then order="$A $B"; else order="$B $A"; fi
  for b in $order; do slice $b $r; done
done
for r in 1 2; do
  if (( r % 2 )); then order="$A $B"; else order="$B $A"; fi
  for b in $order; do md $b $r; done
done
python3 bench/results/2026-11-27-peakfs-checkpoint-scale/summary.py "$O" | tee "$O/summary.txt"
date -u
