#!/usr/bin/env bash
# Reads of whole mapped pages straight into the reply (rd, gpu-run/rd/ = 116a3f1) against
# extents alone (ext, gpu-run/ext/):
# 1) IOR N-1 only, 8 servers x 1 worker, pinned, 8 processes of 512 MiB, 2 iterations:
#    ext rd rd ext;
# 2) the empty-file mdtest phases with the echo ceilings, 8 x 1, 10,000 files, 3 iterations,
#    rd (nothing on the metadata path changed; a check).
# Usage: call-c.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}; F=${F:-10000}
run() { # NAME BUILD WHAT ITER
  RUST_LOG=peakfs=info timeout 240 gpu-run/$2/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $P --files $F --ior-mib $IOR --iterations $4 --only $3 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "echo-sync|echo-routed|xfer|ior|empty"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run ext1 ext ior-n1 ${ITER:-2}; run rd1 rd ior-n1 ${ITER:-2}; run rd2 rd ior-n1 ${ITER:-2}; run ext2 ext ior-n1 ${ITER:-2}
run md-rd rd empty ${MITER:-3}
date -u
cd $O; tar czf /tmp/runs-c.tgz *.jsonl *.err *.logs; rm -rf *.jsonl *.err *.logs; mv /tmp/runs-c.tgz .; ls
