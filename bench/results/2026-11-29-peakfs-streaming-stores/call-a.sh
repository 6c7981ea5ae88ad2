#!/usr/bin/env bash
# The file controller's mmap backend writing with streaming (non-temporal) stores (nt,
# gpu-run/nt/) against the build before (reply = 526de86, gpu-run/reply/, plain memcpy).
# 1) the raw file controller, 8 threads, write and read, reply nt nt reply;
# 2) IOR, 8 servers x 1 worker, pinned, 8 processes of 512 MiB, 2 iterations, reply nt nt reply;
# 3) metadata, 10,000 files per process, 2 iterations, reply nt.
# Usage: call-a.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}; RAW=${RAW:-4096}; F=${F:-10000}; TH=${TH:-8}
img=/dev/shm/raw.img
for b in reply nt nt reply; do for op in write read; do rm -f $img; echo "== raw $b $op"; gpu-run/$b/nvme-bench --controller file:$img --create-mib $RAW --backend mmap --threads $TH --queues $((TH/2)) --workers $((TH/2)) --inflight 1 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(GB/s|p99 )"; done; done | tee $O/raw.txt
rm -f $img
run() { # NAME BUILD ONLY FILES
  RUST_LOG=peakfs=info timeout 300 gpu-run/$2/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $P --files $4 --ior-mib $IOR --iterations ${ITER:-2} --only $3 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "echo-sync|echo-routed|xfer|ior|create-empty|stat-empty"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run reply1 reply ior 100; run nt1 nt ior 100; run nt2 nt ior 100; run reply2 reply ior 100
run mreply reply mdtest $F; run mnt nt mdtest $F
date -u
cd $O; tar czf /tmp/runs-a.tgz *.jsonl *.err *.logs; rm -rf *.jsonl *.err *.logs; mv /tmp/runs-a.tgz .; ls
