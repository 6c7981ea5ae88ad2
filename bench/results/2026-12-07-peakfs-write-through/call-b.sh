#!/usr/bin/env bash
# Call B (fewer runs, for the device time left): writes and attribute changes written through before their reply (new = 9e53ed8:
# PStore::write_through on WRITE, SETATTR, TRUNCATE, IO_UNIT, OPEN O_TRUNC, MKINODE; log marks after
# data flushes) against the last measured head (base = 5da640a). mdtest in the order
# new base, then IOR new base.
# Builds: `cargo build --release -p peakfs --bins`, stripped, in gpu-run/. Usage: call-b.sh OUT
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
run() { # NAME BUILD WORKLOAD-ARGS...
  local name=$1 build=$2; shift 2
  pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
  timeout 280 gpu-run/$build/peakfs bench --local-pin --local-cluster 8 --local-workers 1 --local-data-mib 4096 --local-backend mmap --procs 8 --iterations 2 "$@" --json > $O/$name.jsonl 2> $O/$name.err || { echo "FAILED $name"; tail -3 $O/$name.err; }
  echo "== $name"; python3 $T $O/$name.jsonl | grep -E "echo-sync|echo-routed|create-|stat-|remove-|ior-"
  grep -h "warning" $O/$name.err
}
MD=(--only mdtest --files 10000)
IOR=(--only ior --files 100 --ior-mib 512)
run m1 new10 "${MD[@]}"; run m1base base10 "${MD[@]}"
run i1 new10 "${IOR[@]}"; run i1base base10 "${IOR[@]}"
date -u
python3 bench/results/2026-11-29-peakfs-layout-hold/summary.py $O
cd $O; tar czf /tmp/runs-b.tgz *.jsonl *.err; rm -rf *.jsonl *.err; mv /tmp/runs-b.tgz callb-runs.tgz; ls
