#!/usr/bin/env bash
# Call H: final (726580f) against cap = final + a write-behind pump that submits at most 8
# commands per call (a write-back's copies into the controller's bounce slots spread over
# the worker's rounds instead of one). Rounds ABBA, empty-file phases, 8 x 1 and 4 x 2,
# 6 rounds each; the workers' longest log work between rounds.
set -u
O=${1:?}; nproc; date -u
AB=bench/results/2026-11-26-peakfs-small-file-write-out/ab.py
md() { # build round cluster workers tag
  local b=$1 i=$2 c=$3 w=$4 t=$5
  local f=$O/$t-$b-$i
  RUST_LOG=info timeout 150 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $c --local-workers $w --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --local-logs $O/logs-$t-$b-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
ab() { if (( $1 % 2 )); then echo final cap; else echo cap final; fi; }
for i in $(seq 1 6); do for b in $(ab $i); do md $b $i 8 1 e8x1; done; done
for i in $(seq 1 6); do for b in $(ab $i); do md $b $i 4 2 e4x2; done; done
{ for t in e8x1 e4x2; do echo "== $t: final cap"; python3 $AB "$O/$t-*.jsonl" final cap; done
  echo "== longest log work between rounds (us), median / max over workers"
  for t in e8x1 e4x2; do for b in final cap; do grep -ho "log_work_max_us=[0-9]*" $O/logs-$t-$b-*/s*.log | cut -d= -f2 | sort -n | awk -v t="$t $b" '{a[NR]=$1} END {print t, a[int((NR+1)/2)], a[NR], NR" workers"}'; done; done
  for t in e8x1 e4x2; do for i in $(seq 1 6); do python3 bench/results/2026-11-26-peakfs-bigdir-latency/lat.py $O/$t-cap-$i.jsonl "$t cap $i"; python3 bench/results/2026-11-26-peakfs-bigdir-latency/lat.py $O/$t-final-$i.jsonl "$t final $i"; done; done | grep -o "^[^|]*\|create-bigdir [^]]*]" | paste - - - - ; } > $O/summary.txt
cat $O/summary.txt; grep -c FAILED $O/*.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
