#!/usr/bin/env bash
# Checkpoint pieces written on a queue of their own (`queue`) against the build before
# (`head`), alternating ABBA, on the GPU host's 16 cores (CPU only).
# 1. peakfs-slice-bench at a million files (one slice, no network): the longest piece stop.
# 2. peakfs bench, 8 servers x 1 worker, 8 processes (--local-pin), --iterations 3, create
#    and stat of 40,000 empty files per process (2-3 checkpoints per worker).
# ROUNDS rounds of each; FORTY=0 leaves out the bench runs. Usage: call-a.sh OUT (run from the repository root, stripped release
# builds in gpu-run/ckpt/{head,queue}).
set -u; shopt -s nullglob
O=${1:?}; G=${G:-gpu-run/ckpt}; mkdir -p $O; nproc; date -u
slice() { # build, round
  $G/$1/peakfs-slice-bench --files 1000000 --rounds 1 --bytes-per-inode 4096 --data-mib 8192 > $O/slice$2-$1.txt 2>&1 || echo FAILED slice $1
  echo "== slice$2 $1"; grep -E "^(create|lookup|unlink)|checkpoint stops" $O/slice$2-$1.txt | cut -c1-160
}
run() { # build, round
  local f=$O/forty$2-$1
  RUST_LOG=info timeout 300 $G/$1/peakfs bench --local-pin --procs 8 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --iterations 3 --local-logs $f-logs --json --files 40000 --only create-empty --only stat-empty > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  echo "== forty$2 $1"
  python3 bench/results/2026-11-28-peakfs-checkpoint-queue/ckpt.py $f.jsonl $f-logs
}
for i in $(seq 1 ${ROUNDS:-3}); do
  if (( i % 2 )); then o="head queue"; else o="queue head"; fi
  for b in $o; do slice $b $i; done
  (( ${FORTY:-1} )) && for b in $o; do run $b $i; done
done
date -u
cd $O && tar czf runs.tgz *.txt *.jsonl *.err *-logs && rm -rf *.txt *.jsonl *.err *-logs && ls
