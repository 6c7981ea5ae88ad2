#!/usr/bin/env bash
# Call E: cur against shared (the commit) once more: 8 rounds ABBA of the empty-file phases in
# 4 x 2, and 4 of the 3,901-byte phases in 8 x 1.
set -u
O=${1:?}; nproc; date -u
AB=bench/results/2026-11-26-peakfs-small-file-write-out/ab.py
LAT=bench/results/2026-11-26-peakfs-bigdir-latency/lat.py
md() { # build round cluster workers tag size
  local b=$1 i=$2 c=$3 w=$4 t=$5 z=$6
  local f=$O/$t-$b-$i
  RUST_LOG=info timeout 150 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $c --local-workers $w --local-data-mib 4096 --only create-$z --only stat-$z --only remove-$z --local-logs $O/logs-$t-$b-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
ab() { if (( $1 % 2 )); then echo cur shared; else echo shared cur; fi; }
for i in $(seq 1 8); do for b in $(ab $i); do md $b $i 4 2 e4x2 empty; done; done
for i in $(seq 1 4); do for b in $(ab $i); do md $b $i 8 1 s8x1 3901; done; done
{ for t in e4x2 s8x1; do echo "== $t: cur shared"; python3 $AB "$O/$t-*.jsonl" cur shared; done; } > $O/summary.txt
cat $O/summary.txt
for t in e4x2 s8x1; do for b in cur shared; do for i in $(seq 1 8); do [ -f $O/$t-$b-$i.jsonl ] && python3 $LAT $O/$t-$b-$i.jsonl "$t $b $i"; done; done; done > $O/lat.txt
for t in e4x2 s8x1; do for b in cur shared; do echo "== $t $b longest log work per worker (us), sorted, all rounds"; cat $O/logs-$t-$b-*/s*.log | grep -o "log_work_max_us=[0-9]*" | cut -d= -f2 | sort -n | tr '\n' ' '; echo; done; done > $O/logwork.txt
cat $O/logwork.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
