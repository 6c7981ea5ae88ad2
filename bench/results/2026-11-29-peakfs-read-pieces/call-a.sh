#!/usr/bin/env bash
# IOR only, 8 servers x 1 worker, pinned, mmap backend, 8 client processes, 512 MiB each:
#   old (gpu-run/old/: c4e1454, one READ per read-ahead window),
#   ra  (gpu-run/ra/: the read-ahead as a stream of 256 KiB READs; replies copied out of the
#        receive buffer),
#   cur (gpu-run/cur/: ra, and large replies received straight into their own buffers),
# in the order old ra cur cur ra old; then the raw file controller.
# Usage: call-a.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}; RAW=${RAW:-4096}
run() { # NAME BUILD
  RUST_LOG=peakfs=info timeout 240 gpu-run/$2/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $P --files 100 --ior-mib $IOR --iterations ${ITER:-2} --only ior --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "xfer|ior"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run old1 old; run ra1 ra; run cur1 cur; run cur2 cur; run ra2 ra; run old2 old
img=/dev/shm/raw.img; rm -f $img
for op in write read; do echo "== raw $op"; gpu-run/cur/nvme-bench --controller file:$img --create-mib $RAW --backend mmap --threads 8 --queues 4 --workers 4 --inflight 1 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(IOPS|GB/s|p99 )"; done | tee $O/raw.txt
rm -f $img; date -u
cd $O && tar czf runs-a.tgz *.jsonl *.err *.logs && rm -rf *.jsonl *.err *.logs && ls
