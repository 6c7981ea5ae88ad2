#!/usr/bin/env bash
# Call J: final (9be8de9) against review (d760199: the Icache write-back that waits for its
# data pages checks whether their write-out is in flight instead of pumping it a second
# time per round). Rounds ABBA, 8 x 1:
# 3,901-byte phases (4 rounds).
set -u
O=${1:?}; nproc; date -u
AB=bench/results/2026-11-26-peakfs-small-file-write-out/ab.py
LAT=bench/results/2026-11-26-peakfs-bigdir-latency/lat.py
md() { # build round cluster workers tag size
  local b=$1 i=$2 c=$3 w=$4 t=$5 z=$6
  local f=$O/$t-$b-$i
  RUST_LOG=info timeout 150 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $c --local-workers $w --local-data-mib 4096 --only create-$z --only stat-$z --only remove-$z --local-logs $O/logs-$t-$b-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
ab() { if (( $1 % 2 )); then echo final review; else echo review final; fi; }
for i in $(seq 1 4); do for b in $(ab $i); do md $b $i 8 1 s8x1 3901; done; done
{ for t in s8x1; do echo "== $t: final review"; python3 $AB "$O/$t-*.jsonl" final review; done; } > $O/summary.txt
cat $O/summary.txt
for t in s8x1; do for b in final review; do for i in $(seq 1 6); do [ -f $O/$t-$b-$i.jsonl ] && python3 $LAT $O/$t-$b-$i.jsonl "$t $b $i"; done; done; done > $O/lat.txt
for t in s8x1; do for b in final review; do echo "== $t $b longest log work per worker (us), sorted, all rounds"; cat $O/logs-$t-$b-*/s*.log | grep -o "log_work_max_us=[0-9]*" | cut -d= -f2 | sort -n | tr '\n' ' '; echo; done; done > $O/logwork.txt
cat $O/logwork.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
