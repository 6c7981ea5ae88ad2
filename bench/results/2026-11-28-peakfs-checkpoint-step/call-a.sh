#!/usr/bin/env bash
# Checkpoint pieces of 256 KiB (the default), 64 KiB and 32 KiB, now that they are written on
# the checkpoint queue without the pump waiting: builds s256, s64, s32 (CHECKPOINT_STEP
# changed, nothing else), or the builds named in BUILDS, rotating (with two: ABBA). peakfs-slice-bench at a million inodes, then peakfs bench
# 8 x 1, 8 processes, --local-pin, --iterations 3, create and stat of 40,000 empty files per
# process. ROUNDS rounds. Usage: call-a.sh OUT (from the repository root; builds in
# gpu-run/step/).
set -u; shopt -s nullglob
O=${1:?}; G=${G:-gpu-run/step}; mkdir -p $O; nproc; date -u
S=bench/results/2026-11-28-peakfs-checkpoint-queue/ckpt.py
slice() { # build, round
  $G/$1/peakfs-slice-bench --files 1000000 --rounds 1 --bytes-per-inode 4096 --data-mib 8192 > $O/slice$2-$1.txt 2>&1 || echo FAILED slice $1
  echo "== slice$2 $1"; grep -E "^create|checkpoint stops" $O/slice$2-$1.txt | cut -c1-150
}
run() { # build, round
  local f=$O/forty$2-$1
  RUST_LOG=info timeout 300 $G/$1/peakfs bench --local-pin --procs 8 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --iterations 3 --local-logs $f-logs --json --files 40000 --only create-empty --only stat-empty > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  echo "== forty$2 $1"; python3 $S $f.jsonl $f-logs | grep -v "private\|echo-sync"
}
for i in $(seq 1 ${ROUNDS:-3}); do
  set -- ${BUILDS:-s256 s64 s32}
  for _ in $(seq 2 $i); do set -- "${@:$#}" "${@:1:$#-1}"; done
  o="$*"
  for b in $o; do slice $b $i; done
  for b in $o; do run $b $i; done
done
date -u
cd $O && tar czf runs.tgz *.txt *.jsonl *.err *-logs && rm -rf *.txt *.jsonl *.err *-logs && ls
