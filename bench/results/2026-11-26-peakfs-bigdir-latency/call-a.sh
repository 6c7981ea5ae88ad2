#!/usr/bin/env bash
# Call A: where a bigdir operation's time goes, from the clients' side. Build `lat` =
# 2b7d069 + per-operation latencies in the bench records. 8 x 1 and 4 x 2, empty files,
# 4 runs each, then one 8 x 1 run with 4x the files (phases 4x as long).
set -u
O=${1:?}; nproc; date -u
L=bench/results/2026-11-26-peakfs-bigdir-latency/lat.py
md() { # build run cluster workers tag args...
  local b=$1 i=$2 c=$3 w=$4 t=$5; shift 5
  local f=$O/$t-$b-$i
  RUST_LOG=info timeout 150 gpu-run/$b/peakfs bench --local-pin --procs 8 --local-cluster $c --local-workers $w --local-data-mib 4096 "$@" --local-logs $O/logs-$t-$b-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  python3 $L $f.jsonl "$t $b $i"
  grep -h "worker stopped" $O/logs-$t-$b-$i/s*.log | grep -o "checkpoints=.*" | sort | uniq -c | sort -rn | head -3
}
EMPTY=(--only create-empty --only stat-empty --only remove-empty)
for i in 1 2 3 4; do md lat $i 8 1 e8x1 --files 10000 "${EMPTY[@]}"; done | tee $O/e8x1.txt
for i in 1 2 3 4; do md lat $i 4 2 e4x2 --files 10000 "${EMPTY[@]}"; done | tee $O/e4x2.txt
md lat 1 8 1 long8x1 --files 40000 "${EMPTY[@]}" | tee $O/long8x1.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
