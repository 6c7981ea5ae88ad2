#!/usr/bin/env bash
# Placement hints as extended attributes (hint = 647b351, gpu-run/hint/) against the build
# before (prev = adc2c81, gpu-run/prev/): CREATE and MKINODE carry 4 bytes more (the new
# inode's I/O unit). mdtest, 8 servers x 1 worker pinned, 8 processes, mmap backend, 10,000
# files per process, 2 iterations, hint prev prev hint (call A ran prev hint hint prev).
# Usage: call-a.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}; F=${F:-10000}
run() { # NAME BUILD ONLY FILES
  RUST_LOG=peakfs=info timeout 300 gpu-run/$2/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $P --files $4 --ior-mib $IOR --iterations ${ITER:-2} --only $3 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "echo-sync|echo-routed|xfer|ior|create-|stat-"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run mhint3 hint mdtest $F; run mprev3 prev mdtest $F; run mprev4 prev mdtest $F; run mhint4 hint mdtest $F
date -u
cd $O; tar czf /tmp/runs-b.tgz *.jsonl *.err *.logs; rm -rf *.jsonl *.err *.logs; mv /tmp/runs-b.tgz .; ls
