#!/usr/bin/env bash
# Call D5: the mmap backend's pages populated writable at start (xg) against populated for
# reading only (xf): the slice bench's data workloads, the raw controller (nvme-bench, 256 KiB
# writes into a fresh file, then reads), and IOR on 16 cores (mmap, 1 GiB per process),
# alternating, twice.
set -u
O=${1:?}; nproc; date -u; df -h /dev/shm | tail -1
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
for i in 1 2; do for b in xf xg; do
  echo -n "slice $b $i: "; gpu-run/$b/peakfs-slice-bench --files 2000 --rounds 3 --writes 2000 --backend mmap 2>&1 | grep -E "^write" | cut -d'(' -f1 | tr '\n' ' '; echo
  for op in write read; do
    echo -n "raw $b $i $op: "; gpu-run/$b/nvme-bench --controller file:/dev/shm/raw-$b.img --create-mib 4096 --backend mmap --threads 8 --queues 4 --workers 4 --inflight 1 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^GB/s" | tr '\n' ' '; echo
  done
  rm -f /dev/shm/raw-$b.img
done; done
for i in 1 2; do for b in xf xg; do
  gpu-run/$b/peakfs bench --local-backend mmap --local-pin --procs 8 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --echo-ops 20000 --only ior --json > $O/ior-$b-$i.jsonl 2> $O/ior-$b-$i.err || { echo FAILED; tail -3 $O/ior-$b-$i.err; }
  sum $O/ior-$b-$i.jsonl "$b $i"
done; done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
