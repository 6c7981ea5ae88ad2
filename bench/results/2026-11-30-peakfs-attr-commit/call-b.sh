#!/usr/bin/env bash
# Call B: mdtest only, 3 runs a build in the order new base base new new base (call A ran on a
# noisy host: echo-sync 359-469 K ops/s across its runs). Builds as in call A.
# Usage: call-b.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
run() { # NAME BUILD
  pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
  timeout 280 gpu-run/$2/peakfs bench --local-pin --local-cluster 8 --local-workers 1 --local-data-mib 4096 --local-backend mmap --procs 8 --iterations 2 --only mdtest --files 10000 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "echo-sync|echo-routed|create-empty|stat-empty"
  grep -h "warning" $O/$1.err
}
run m1 s9; run m1base s8; run m2base s8; run m2 s9; run m3 s9; run m3base s8
date -u
python3 bench/results/2026-11-29-peakfs-layout-hold/summary.py $O
cd $O; tar czf /tmp/runs-b.tgz *.jsonl *.err; rm -rf *.jsonl *.err; mv /tmp/runs-b.tgz callb-runs.tgz; ls
