#!/usr/bin/env bash
# Where IOR's data path waits (current build, gpu-run/cur/), and the metadata phases of the
# build before (old) and now (cur):
# 1) IOR, 1 iteration each: 8 servers x 8 processes, 8 x 4, 4 x 8, then 8 x 8 again
#    (if the servers set the pace, fewer processes keep the total; if the clients do, fewer
#    servers keep it);
# 2) the empty-file mdtest phases with the echo ceilings, 8 x 1, 10,000 files, 3 iterations:
#    old, cur, cur, old.
# Usage: call-b.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
M=${M:-4096}; IOR=${IOR:-512}; F=${F:-10000}
run() { # NAME BUILD SERVERS PROCS WHAT ITER
  RUST_LOG=peakfs=info timeout 240 gpu-run/$2/peakfs bench ${PIN---local-pin} --local-cluster $3 --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $4 --files $F --ior-mib $IOR --iterations $6 --only $5 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "echo-sync|echo-routed|xfer|ior|empty"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run ior-8x8a cur 8 8 ior 1; run ior-8x4 cur 8 4 ior 1; run ior-4x8 cur 4 8 ior 1; run ior-8x8b cur 8 8 ior 1
run md-old1 old 8 8 empty ${ITER:-3}; run md-cur1 cur 8 8 empty ${ITER:-3}; run md-cur2 cur 8 8 empty ${ITER:-3}; run md-old2 old 8 8 empty ${ITER:-3}
date -u
cd $O && tar czf runs-b.tgz *.jsonl *.err *.logs && rm -rf *.jsonl *.err *.logs && ls
