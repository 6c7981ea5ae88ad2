#!/usr/bin/env bash
# Call H: IOR on 16 cores (mmap backend, 1 GiB per process), the final build (fin2) on 4 servers
# x 2 workers against 8 servers x 1 worker (no request is forwarded between workers: each
# server's one worker receives and runs everything), alternating, twice.
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
for i in 1 2; do for shape in 4x2 8x1; do
  s=${shape%x*}; w=${shape#*x}
  gpu-run/fin2/peakfs bench --local-backend mmap --local-pin --procs 8 --local-cluster $s --local-workers $w --local-data-mib $((32768 / s)) --ior-mib 1024 --echo-ops 20000 --only ior --json > $O/ior-$shape-$i.jsonl 2> $O/ior-$shape-$i.err || { echo FAILED; tail -3 $O/ior-$shape-$i.err; }
  sum $O/ior-$shape-$i.jsonl "$shape $i"
done; done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
