#!/usr/bin/env bash
# Call A: writes and attribute changes written through before their reply (new = ea688f4:
# PStore::write_through on WRITE, SETATTR, TRUNCATE, IO_UNIT, OPEN O_TRUNC, MKINODE; log marks after
# data flushes) against the last measured head (base = 5da640a). mdtest in the order
# base new new base, then IOR new base.
# Builds: `cargo build --release -p peakfs --bins`, stripped, in gpu-run/.
# Usage: call-a.sh OUT [MDTEST-BUILDS [IOR-BUILDS]] (call B: "new10 base10 base10 new10" "base10 new10")
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
name() { [ $1 = base10 ] && echo $2base || echo $2; } # m1, m1base, ...
k=0; for b in ${2:-base10 new10 new10 base10}; do k=$((k+1)); run $(name $b m$(( (k+1)/2 ))) $b "${MD[@]}"; done
k=0; for b in ${3:-new10 base10}; do k=$((k+1)); run $(name $b i$(( (k+1)/2 ))) $b "${IOR[@]}"; done
date -u
python3 bench/results/2026-11-29-peakfs-layout-hold/summary.py $O
cd $O; tar czf /tmp/runs.tgz *.jsonl *.err; rm -rf *.jsonl *.err; mv /tmp/runs.tgz runs.tgz; ls
