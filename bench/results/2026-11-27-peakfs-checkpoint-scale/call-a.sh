#!/usr/bin/env bash
# Checkpoints at a million inodes per slice and mdtest at 2 M files per phase, builds A, B, ...
# (binaries in gpu-run/ckpt/NAME), in the order A B .. then .. B A, ROUNDS times (default 2).
# Usage: [ROUNDS=n] call-a.sh OUT [A B ...]
# Call A: call-a.sh OUT (old = 6513813: checkpoints in a new buffer each time, cART walked in
# name order; new = d7a2d7c: the buffer kept, cART walked in node order).
# Call B: call-b.sh OUT, which is call-a.sh OUT new steps (steps = 005297f: checkpoints written
# between requests, and the log a megabyte at a time).
set -u
O=${1:?}; mkdir -p "$O"; nproc; date -u
D=gpu-run/ckpt; builds=("${@:2}"); ((${#builds[@]})) || builds=(old new)
rev=(); for b in "${builds[@]}"; do rev=("$b" "${rev[@]}"); done
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
for run in slice md; do
  for ((r = 1; r <= ${ROUNDS:-2}; r++)); do
    if (( r % 2 )); then order=("${builds[@]}"); else order=("${rev[@]}"); fi
    for b in "${order[@]}"; do $run "$b" $r; done
  done
done
python3 bench/results/2026-11-27-peakfs-checkpoint-scale/summary.py "$O" | tee "$O/summary.txt"
date -u
