#!/usr/bin/env bash
# The copy helper (gpu-run/split/): a direct transfer of at least --copy-split-kib KiB is
# copied half by its worker (inline queue) and half by a controller thread (a fifth queue).
# 1) IOR, 8 servers x 1 worker, pinned, 8 processes of 512 MiB, 2 iterations, with the
#    helper off (s0), from 64 KiB (s64) and from 32 KiB (s32, which splits the 47,008-byte
#    N-1 transfers too), in the order s0 s64 s32 s64 s0 s32;
# 2) the raw file controller (mmap) on the same host, 8 threads;
# 3) metadata, 10,000 files per process, s0 and s64 (the helper never takes a metadata I/O).
# Usage: call-a.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
B=gpu-run/split
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}; RAW=${RAW:-4096}; F=${F:-10000}
run() { # NAME SPLIT_KIB ONLY FILES
  RUST_LOG=peakfs=info timeout 300 $B/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-server-arg=--copy-split-kib=$2 --local-logs $O/$1.logs --procs $P --files $4 --ior-mib $IOR --iterations ${ITER:-2} --only $3 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "echo-sync|xfer|ior|create|stat"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
for r in s0a:0 s64a:64 s32a:32 s64b:64 s0b:0 s32b:32; do run ${r%:*} ${r#*:} ior 100; done
img=/dev/shm/raw.img; rm -f $img
for op in write read; do echo "== raw $op"; $B/nvme-bench --controller file:$img --create-mib $RAW --backend mmap --threads 8 --queues 4 --workers 4 --inflight 1 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(IOPS|GB/s|p99 )"; done | tee $O/raw.txt
rm -f $img
for r in m0:0 m64:64; do run ${r%:*} ${r#*:} mdtest $F; done
date -u
cd $O; tar czf /tmp/runs-a.tgz *.jsonl *.err *.logs; rm -rf *.jsonl *.err *.logs; mv /tmp/runs-a.tgz .; ls
