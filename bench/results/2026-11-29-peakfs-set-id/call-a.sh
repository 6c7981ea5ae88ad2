#!/usr/bin/env bash
# Call A: this stop's build (gpu-run/s8/, e393829: WRITE carries drop_set_id in its flags byte,
# workers report direct and copied bytes) against the last stop's final build (gpu-run/final/,
# b27bb01), alternating, 2 IOR and 2 mdtest runs each, with the command of the last stop's
# calls; then each run's worker totals of data moved direct and through bounce slots.
# Usage: call-a.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}; F=${F:-10000}
run() { # NAME BUILD ONLY FILES
  pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
  RUST_LOG=peakfs=info timeout 300 gpu-run/$2/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $P --files $4 --ior-mib $IOR --iterations ${ITER:-2} --only $3 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "echo-sync|echo-routed|xfer|ior|create-|stat-"
  cat $O/$1.logs/s*.log | grep -o "direct_mib=[0-9]* copied_mib=[0-9]*" | awk -F'[= ]' '{d+=$2; c+=$4} END {print "workers: direct_mib", d, "copied_mib", c}'
  grep -h "warning" $O/$1.err
}
run i1base final ior 100; run i1 s8 ior 100
run m1base final mdtest $F; run m1 s8 mdtest $F
run i2 s8 ior 100; run i2base final ior 100
run m2 s8 mdtest $F; run m2base final mdtest $F
date -u
python3 bench/results/2026-11-29-peakfs-layout-hold/summary.py $O
cd $O; tar czf /tmp/runs-a.tgz *.jsonl *.err *.logs; rm -rf *.jsonl *.err *.logs; mv /tmp/runs-a.tgz .; ls
