#!/usr/bin/env bash
# Call D: `lean` (call A) against `ahead` = lean + the log written ahead of the Icache's
# write-backs in batches of 64 KiB, staged without a copy of the log (the stop line also gives
# checkpoints, Icache write-backs and the longest log work between rounds). Rounds ABBA:
# 4 x 2 and 8 x 1 empty-file phases, 3,901-byte files, IOR.
set -u
O=${1:?}; nproc; date -u
S=bench/results/2026-11-26-peakfs-data-path/summary.py
md() { # build round cluster workers tag only...
  local b=$1 i=$2 c=$3 w=$4 t=$5; shift 5
  local f=$O/$t-$b-$i
  RUST_LOG=info timeout 150 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $c --local-workers $w --local-data-mib 4096 "$@" --local-logs $O/logs-$t-$b-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  python3 $S $f.jsonl "$t $b $i"
  grep -h "worker stopped" $O/logs-$t-$b-$i/s*.log | grep -o "checkpoints=.*" | sort | uniq -c | sort -rn | head -3
}
ab() { if (( $1 % 2 )); then echo lean ahead; else echo ahead lean; fi; }
EMPTY=(--only create-empty --only stat-empty --only remove-empty)
for i in $(seq 1 10); do for b in $(ab $i); do md $b $i 4 2 e4x2 "${EMPTY[@]}"; done; done > $O/e4x2.txt
for i in $(seq 1 8); do for b in $(ab $i); do md $b $i 8 1 e8x1 "${EMPTY[@]}"; done; done > $O/e8x1.txt
for i in 1 2 3 4; do for b in $(ab $i); do md $b $i 4 2 s4x2 --only create-3901 --only stat-3901 --only remove-3901; done; done > $O/s4x2.txt
ior() { # build round
  timeout 150 gpu-run/$1/peakfs bench --local-backend mmap --local-pin --procs 8 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --only xfer-write --only xfer-read --only ior-nn-write --only ior-nn-read --only ior-n1-write --only ior-n1-read --json > $O/ior-$1-$2.jsonl 2> $O/ior-$1-$2.err || { echo FAILED; tail -3 $O/ior-$1-$2.err; }
  python3 $S $O/ior-$1-$2.jsonl "ior $1 $2"
}
{ ior lean 1; ior ahead 1; ior ahead 2; ior lean 2; } > $O/ior.txt
AB=bench/results/2026-11-26-peakfs-small-file-write-out/ab.py
{ for t in e4x2 e8x1 s4x2; do echo "== $t: lean ahead"; python3 $AB "$O/$t-*.jsonl" lean ahead; done
  echo "== IOR: lean ahead"; python3 bench/results/2026-11-26-peakfs-doorbell-bell/ior_ab.py "$O/ior-*.jsonl" lean ahead
  echo "== ahead: longest log work between rounds (us), median / max over workers"
  for t in e4x2 e8x1 s4x2; do grep -ho "log_work_max_us=[0-9]*" $O/logs-$t-ahead-*/s*.log | cut -d= -f2 | sort -n | awk -v t=$t '{a[NR]=$1} END {print t, a[int((NR+1)/2)], a[NR], NR" workers"}'; done; } > $O/summary.txt
cat $O/summary.txt; grep -c FAILED $O/*.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
