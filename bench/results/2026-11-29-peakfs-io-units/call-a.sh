#!/usr/bin/env bash
# I/O units (unit = 1f2b7e3, gpu-run/unit/) against the build before (base = b045d1b,
# gpu-run/base/): the whole bench, 8 servers x 1 worker pinned, 8 processes, mmap backend.
# 1) IOR, 512 MiB per process, 2 iterations, base unit unit base;
# 2) mdtest, 10,000 files per process, 2 iterations, base unit unit base.
# Usage: call-a.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}; F=${F:-10000}
run() { # NAME BUILD ONLY FILES
  RUST_LOG=peakfs=info timeout 300 gpu-run/$2/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $P --files $4 --ior-mib $IOR --iterations ${ITER:-2} --only $3 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "echo-sync|echo-routed|xfer|ior|create-empty|stat-empty"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run base1 base ior 100; run unit1 unit ior 100; run unit2 unit ior 100; run base2 base ior 100
run mbase1 base mdtest $F; run munit1 unit mdtest $F; run munit2 unit mdtest $F; run mbase2 base mdtest $F
date -u
cd $O; tar czf /tmp/runs-a.tgz *.jsonl *.err *.logs; rm -rf *.jsonl *.err *.logs; mv /tmp/runs-a.tgz .; ls
