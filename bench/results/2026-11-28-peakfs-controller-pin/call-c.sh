#!/usr/bin/env bash
# Inline queues and a data write-out queue of its own (8 x 1, 16 cores): the whole
# `peakfs bench` with the build of ac948a3 (A, gpu-run/cpin/) against this stop's build
# (B, gpu-run/inline/: each worker runs its own data queue's commands; staged data pages
# written out on a fourth queue), ABBA, then the raw controller.
# Usage: call-c.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; nproc; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
run() { # NAME BUILD
  RUST_LOG=info timeout 280 $2/peakfs bench --local-pin --local-cluster 8 --local-workers 1 --local-data-mib 4096 --local-backend mmap --local-logs $O/$1-logs --procs 8 --files 10000 --ior-mib 512 --iterations 3 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl
}
run a1 gpu-run/cpin; run b1 gpu-run/inline; run b2 gpu-run/inline; run a2 gpu-run/cpin
img=/dev/shm/raw.img; rm -f $img
for op in write read; do echo "== raw $op"; gpu-run/inline/nvme-bench --controller file:$img --create-mib 4096 --backend mmap --threads 8 --queues 4 --workers 4 --inflight 1 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(IOPS|GB/s|p99 )"; done | tee $O/raw.txt
rm -f $img; date -u
cd $O && tar czf runs.tgz *.jsonl *.err *-logs && rm -rf *.jsonl *.err *-logs && ls
