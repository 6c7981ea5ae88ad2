#!/usr/bin/env bash
# Call C: the final build of the stop (fin4 = 1c4e0e9 or later; see README): the slice bench,
# then empty-file metadata with 4 servers x 2 workers and 8 servers x 1 worker alternating for
# ~240 s, then the whole bench (3,901-byte files and IOR included) twice with 4 x 2.
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
gpu-run/fin4/peakfs-slice-bench --files 20000 --rounds 5 --backend mmap --writes 2000 2>&1 | grep "ns per request"
start=$SECONDS; i=0
while (( SECONDS - start < 240 )); do i=$((i+1)); for l in 4x2 8x1; do
  timeout 200 gpu-run/fin4/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster ${l%x*} --local-workers ${l#*x} --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --json > $O/md-$l-$i.jsonl 2> $O/md-$l-$i.err || { echo FAILED; tail -3 $O/md-$l-$i.err; }
  sum $O/md-$l-$i.jsonl "$l $i"
done; done
echo "metadata rounds: $i at $((SECONDS - start)) s"
for i in 1 2; do
  timeout 200 gpu-run/fin4/peakfs bench --local-backend mmap --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --json > $O/whole-$i.jsonl 2> $O/whole-$i.err || { echo FAILED; tail -3 $O/whole-$i.err; }
  sum $O/whole-$i.jsonl "whole $i"
done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
