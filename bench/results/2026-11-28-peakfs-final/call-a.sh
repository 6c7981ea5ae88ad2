#!/usr/bin/env bash
# The whole PeakFS bench at 7cf282b on 16 cores: `peakfs bench` (echo ceilings, mdtest on
# empty and 3,901-byte files, private and bigdir, IOR N-N and N-1), 8 processes, 10,000 files
# each, IOR 512 MiB each, 3 iterations, servers on tmpfs data files moved with mmap, pinned:
# 8 x 1 twice and 4 x 2 once. Then the raw file controller (the IOR yardstick: mmap, 8
# threads x 1 in flight, 256 KiB) and cART against a HashMap at 10 M names.
# Usage: call-a.sh OUT (from the repository root; release binaries in gpu-run/final/).
set -u
O=${1:?}; B=${B:-gpu-run/final}; mkdir -p $O; nproc; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
run() { # NAME SERVERS WORKERS DATA_MIB
  RUST_LOG=info timeout 280 $B/peakfs bench --local-pin --local-cluster $2 --local-workers $3 --local-data-mib $4 --local-backend mmap --local-logs $O/$1-logs --procs 8 --files 10000 --ior-mib 512 --iterations 3 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl
}
run 8x1a 8 1 4096
run 4x2 4 2 8192
run 8x1b 8 1 4096
img=/dev/shm/raw.img; rm -f $img
for op in write read; do echo "== raw $op"; $B/nvme-bench --controller file:$img --create-mib 4096 --backend mmap --threads 8 --queues 4 --workers 4 --inflight 1 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(IOPS|GB/s|p99 )"; done | tee $O/raw.txt
rm -f $img
echo "== cart"; $B/peakfs-cart-bench --names 10000000 2>&1 | grep -E "^(memory|put|get|remove|longest)" | tee $O/cart.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err *-logs && rm -rf *.jsonl *.err *-logs && ls
