#!/usr/bin/env bash
# 1) IOR only, 8 x 1 pinned: e234c14 (A, gpu-run/inl/: a read-ahead fetched when the reader
#    gets to it) against the asynchronous read-ahead (B, gpu-run/ra/), ABBA;
# 2) metadata only: b7c3183 (C, gpu-run/b7/: inline queues before e234c14) against e234c14
#    (A), CAAC;
# 3) the raw file controller.
# Usage: call-b.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}; F=${F:-10000}; RAW=${RAW:-4096}
run() { # NAME BUILD WHAT
  RUST_LOG=peakfs=info timeout 200 $2/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $P --files $F --ior-mib $IOR --iterations ${ITER:-2} --only $3 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "echo-sync|echo-routed|xfer|ior|empty"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run ior-a1 gpu-run/inl ior; run ior-b1 gpu-run/ra ior; run ior-b2 gpu-run/ra ior; run ior-a2 gpu-run/inl ior
run md-c1 gpu-run/b7 empty; run md-a1 gpu-run/inl empty; run md-a2 gpu-run/inl empty; run md-c2 gpu-run/b7 empty
img=/dev/shm/raw.img; rm -f $img
for op in write read; do echo "== raw $op"; gpu-run/ra/nvme-bench --controller file:$img --create-mib $RAW --backend mmap --threads 8 --queues 4 --workers 4 --inflight 1 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(IOPS|GB/s|p99 )"; done | tee $O/raw.txt
rm -f $img; date -u
cd $O && tar czf runs-b.tgz *.jsonl *.err *.logs && rm -rf *.jsonl *.err *.logs && ls
