#!/usr/bin/env bash
# A file held to its writer's distribution (layout = 41109b7, gpu-run/layout/) against the
# head before it (base = f2101aa, gpu-run/base2/): every WRITE carries one byte more (the
# distribution its bytes were placed by), a commit's SETATTR one byte more, and a WRITE on the
# inode's own slice compares it with the inode's. Both built with
# `cargo build --release -p peakfs --bins`, stripped of debug info.
# mdtest: 8 servers x 1 worker pinned, 8 processes, mmap backend, 10,000 files per process,
# 2 iterations, base layout layout base base layout; then IOR (512 MiB per process),
# base layout layout base.
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
run mbase1 base2 mdtest $F; run mlay1 layout mdtest $F; run mlay2 layout mdtest $F; run mbase2 base2 mdtest $F
run mbase3 base2 mdtest $F; run mlay3 layout mdtest $F
run ibase1 base2 ior 100; run ilay1 layout ior 100; run ilay2 layout ior 100; run ibase2 base2 ior 100
date -u
cd $O; tar czf /tmp/runs-a.tgz *.jsonl *.err *.logs; rm -rf *.jsonl *.err *.logs; mv /tmp/runs-a.tgz .; ls
