#!/usr/bin/env bash
# Call D3: IOR on 16 cores (mmap backend, 1 GiB per process), build xd, the file controller with one
# thread per server (the default) against two (--controller-workers 2: one per worker),
# alternating, twice.
set -u
O=${1:?}; nproc; date -u; df -h /dev/shm | tail -1
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
for i in 1 2; do for cw in 1 2; do
  gpu-run/xd/peakfs bench --local-backend mmap --local-server-arg=--controller-workers=$cw --local-pin --procs 8 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --echo-ops 20000 --only ior --json > $O/ior-cw$cw-$i.jsonl 2> $O/ior-cw$cw-$i.err || { echo FAILED; tail -3 $O/ior-cw$cw-$i.err; }
  sum $O/ior-cw$cw-$i.jsonl "cw$cw $i"
done; done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
