#!/usr/bin/env bash
# Call D2: IOR on 16 cores (mmap backend, 1 GiB per process), xb (file-based data at hash(ino))
# against xc (file-based data at the ino's sequence number: consecutive files on consecutive
# slices), alternating, twice; then xc's whole bench once.
set -u
O=${1:?}; nproc; date -u; df -h /dev/shm | tail -1
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
for i in 1 2; do for b in xb xc; do
  gpu-run/$b/peakfs bench --local-backend mmap --local-pin --procs 8 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --echo-ops 20000 --only ior --json > $O/ior-$b-$i.jsonl 2> $O/ior-$b-$i.err || { echo FAILED; tail -3 $O/ior-$b-$i.err; }
  sum $O/ior-$b-$i.jsonl "$b $i"
done; done
gpu-run/xc/peakfs bench --local-backend mmap --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --json > $O/whole-xc.jsonl 2> $O/whole-xc.err || { echo FAILED; tail -3 $O/whole-xc.err; }
sum $O/whole-xc.jsonl "whole xc"
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
