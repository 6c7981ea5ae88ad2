#!/usr/bin/env bash
# Call D4: IOR on 16 cores (mmap backend, 1 GiB per process), xd (a full write pipeline waits on
# the first server with a write of the file in flight) against xf (on the server of its oldest
# write), alternating, twice; then xf's slice bench with its data workloads (mmap and uring).
set -u
O=${1:?}; nproc; date -u; df -h /dev/shm | tail -1
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
for i in 1 2; do for b in xd xf; do
  gpu-run/$b/peakfs bench --local-backend mmap --local-pin --procs 8 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --echo-ops 20000 --only ior --json > $O/ior-$b-$i.jsonl 2> $O/ior-$b-$i.err || { echo FAILED; tail -3 $O/ior-$b-$i.err; }
  sum $O/ior-$b-$i.jsonl "$b $i"
done; done
for be in mmap uring; do
  gpu-run/xf/peakfs-slice-bench --files 20000 --rounds 3 --writes 2000 --backend $be > $O/slice-$be.txt 2>&1 || echo FAILED
  echo "slice $be"; grep -E "ns per request" $O/slice-$be.txt
done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err *.txt && rm -f *.jsonl *.err *.txt && ls
