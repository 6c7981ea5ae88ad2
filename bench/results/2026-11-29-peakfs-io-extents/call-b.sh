#!/usr/bin/env bash
# I/O-based transfers as extents of their own (ext, gpu-run/ext/) against 9a854cf (base,
# gpu-run/base/, where each transfer went into the file's 64 KiB blocks):
# 1) peakfs-slice-bench (one slice, no network, mmap backend): base ext ext base;
# 2) IOR, 8 servers x 1 worker, pinned, 8 processes of 512 MiB, 2 iterations: base ext ext base;
# 3) the raw file controller (mmap) on the same host, 8 threads.
# Usage: call-b.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}; RAW=${RAW:-4096}
for b in base ext ext base; do echo "== slice $b"; gpu-run/$b/peakfs-slice-bench --files ${SF:-20000} --writes ${SW:-8000} --data-mib 4096 --backend mmap 2>&1 | grep -E "^write-"; done | tee $O/slice.txt
run() { # NAME BUILD
  RUST_LOG=peakfs=info timeout 240 gpu-run/$2/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $P --files 100 --ior-mib $IOR --iterations ${ITER:-2} --only ior --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "xfer|ior"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run base1 base; run ext1 ext; run ext2 ext; run base2 base
img=/dev/shm/raw.img; rm -f $img
for op in write read; do echo "== raw $op"; gpu-run/ext/nvme-bench --controller file:$img --create-mib $RAW --backend mmap --threads 8 --queues 4 --workers 4 --inflight 1 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(IOPS|GB/s|p99 )"; done | tee $O/raw.txt
rm -f $img; date -u
cd $O; tar czf /tmp/runs-b.tgz *.jsonl *.err *.logs; rm -rf *.jsonl *.err *.logs; mv /tmp/runs-b.tgz .; ls
