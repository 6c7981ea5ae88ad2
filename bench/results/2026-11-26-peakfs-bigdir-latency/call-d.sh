#!/usr/bin/env bash
# Call D: a metadata request's cost to its server thread, with almost no echoes in the run
# (--echo-ops 200): busy time per frame of runs holding one, two or three metadata phases.
# 8 x 1, build `lat` as in call C.
set -u
O=${1:?}; nproc; date -u
L=bench/results/2026-11-26-peakfs-bigdir-latency/lat.py
md() { # run tag args...
  local i=$1 t=$2; shift 2
  local f=$O/$t-$i
  RUST_LOG=info timeout 150 gpu-run/lat/peakfs bench --local-pin --procs 8 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --files 10000 --echo-ops 200 "$@" --local-logs $O/logs-$t-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  python3 $L $f.jsonl "$t $i"
  python3 bench/results/2026-11-26-peakfs-bigdir-latency/stops.py $O/logs-$t-$i
}
for i in 1 2; do
  md $i create-bigdir --only create-empty-bigdir
  md $i create-private --only create-empty-private
  md $i stat-bigdir --only create-empty-bigdir --only stat-empty-bigdir
  md $i stat-private --only create-empty-private --only stat-empty-private
  md $i remove-bigdir --only create-empty-bigdir --only stat-empty-bigdir --only remove-empty-bigdir
done 2>&1 | tee $O/parts.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
