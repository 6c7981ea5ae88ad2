#!/usr/bin/env bash
# Call C: the final build of the stop (b27bb01, gpu-run/final/), whose stopping workers log the
# data their zone moved straight from and into requests' buffers (direct_mib) and through
# bounce slots (copied_mib). One IOR run and one mdtest run with the command of calls A and B;
# then each run's worker totals.
# Usage: call-c.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}; F=${F:-10000}
run() { # NAME BUILD ONLY FILES
  RUST_LOG=peakfs=info timeout 300 gpu-run/$2/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $P --files $4 --ior-mib $IOR --iterations ${ITER:-2} --only $3 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "echo-sync|echo-routed|xfer|ior|create-|stat-"
  cat $O/$1.logs/s*.log | grep -o "direct_mib=[0-9]* copied_mib=[0-9]*" | awk -F'[= ]' '{d+=$2; c+=$4} END {print "workers: direct_mib", d, "copied_mib", c}'
  grep -h "warning" $O/$1.err
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run ifinal final ior 100; run mfinal final mdtest $F
date -u
cd $O; tar czf /tmp/runs-c.tgz *.jsonl *.err *.logs; rm -rf *.jsonl *.err *.logs; mv /tmp/runs-c.tgz .; ls
