#!/usr/bin/env bash
# Call F: the final build of this stop (fin2 = the commit that carries this script's folder's
# last results) on 16 cores: the whole bench twice (mmap backend, 8 processes, 10,000 files
# and 1 GiB each), then the slice bench.
set -u
O=${1:?}; nproc; date -u; df -h /dev/shm | tail -1
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
for i in 1 2; do
  gpu-run/fin2/peakfs bench --local-backend mmap --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --json > $O/whole-$i.jsonl 2> $O/whole-$i.err || { echo FAILED; tail -3 $O/whole-$i.err; }
  sum $O/whole-$i.jsonl "whole $i"
done
gpu-run/fin2/peakfs-slice-bench --files 20000 --rounds 3 --writes 2000 --backend mmap 2>&1 | grep "ns per request"
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
