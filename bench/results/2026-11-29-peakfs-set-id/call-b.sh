#!/usr/bin/env bash
# Call B: mdtest only, 3 runs a build in the order base new new base base new, to see whether
# the private-stat gap of call A (new 0.828-0.891 against base 0.916-0.956) repeats.
# Builds as in call A. Usage: call-b.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
run() { # NAME BUILD
  pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
  timeout 300 gpu-run/$2/peakfs bench --local-pin --local-cluster 8 --local-workers 1 --local-data-mib 4096 --local-backend mmap --procs 8 --files 10000 --iterations 2 --only mdtest --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "echo-sync|echo-routed|create-|stat-"
  grep -h "warning" $O/$1.err
}
run m1base final; run m1 s8; run m2 s8; run m2base final; run m3base final; run m3 s8
date -u
python3 bench/results/2026-11-29-peakfs-layout-hold/summary.py $O
cd $O; tar czf /tmp/runs-b.tgz *.jsonl *.err; rm -rf *.jsonl *.err; mv /tmp/runs-b.tgz .; ls
