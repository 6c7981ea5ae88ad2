#!/usr/bin/env bash
# Call B: where a checkpoint's stops go, by kind (take, piece, last piece), at a million
# inodes on one slice (peakfs-slice-bench, 3 runs) and in mdtest at 2 M files per phase
# (8 x 1, 2 runs; each stopping worker logs its longest stop of each kind).
# Usage: call-b.sh OUT (binaries in gpu-run/stops/head)
set -u
O=${1:?}; B=gpu-run/stops/head; mkdir -p $O; nproc; date -u
for r in 1 2 3; do
  echo "== slice $r"
  timeout 150 $B/peakfs-slice-bench --files 1000000 --rounds 1 --data-mib 8192 --bytes-per-inode 4096 2>&1 | tail -6
done | tee $O/slice.txt
for r in 1 2; do
  mkdir -p $O/md-$r.logs
  RUST_LOG=info timeout 200 $B/peakfs bench --local-pin --procs 8 --files 250000 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --local-server-arg=--bytes-per-inode=4096 --only create-empty --only stat-empty --only remove-empty --local-logs $O/md-$r.logs --json > $O/md-$r.jsonl 2> $O/md-$r.err || { echo FAILED md $r; tail -3 $O/md-$r.err; }
  echo "== md $r: per worker, longest checkpoint stop of each kind (us): take piece last; all stops (ms)"
  grep -h "worker stopped" $O/md-$r.logs/s*.log | sed 's/\x1b\[[0-9;]*m//g' | grep -o "checkpoint_take_max_us=[0-9]* checkpoint_piece_max_us=[0-9]* checkpoint_last_max_us=[0-9]* checkpoint_ms=[0-9.]*"
done | tee $O/md.txt
date -u
cd $O && tar czf runs.tgz md-* && rm -rf md-* && ls
