#!/usr/bin/env bash
# Call A: base (31828b2, the head before this change) against cow (an Icache write-back
# takes its blocks' bytes as each command goes out, copying only blocks changed meanwhile).
# Rounds ABBA, 8 procs: empty-file phases in 8 x 1 (6 rounds) and 4 x 2 (4 rounds),
# 3,901-byte phases in 8 x 1 (5 rounds). Usage: call-a.sh OUT [BUILD_A BUILD_B [DIR]]
# (builds DIR/BUILD; base and cow in gpu-run/cow unless named: calls C and F name others).
# EXTRA: more `peakfs bench` arguments for every run (call K). E8, S8, E4: the rounds of
# each layout (call L).
set -u
O=${1:?}; A=${2:-base}; B=${3:-cow}; G=${4:-gpu-run/cow}; nproc; date -u
AB=bench/results/2026-11-26-peakfs-small-file-write-out/ab.py
LAT=bench/results/2026-11-26-peakfs-bigdir-latency/lat.py
md() { # build round cluster workers tag size
  local b=$1 i=$2 c=$3 w=$4 t=$5 z=$6
  local f=$O/$t-$b-$i
  RUST_LOG=info timeout 150 $G/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $c --local-workers $w --local-data-mib 4096 --only create-$z --only stat-$z --only remove-$z ${EXTRA:-} --local-logs $O/logs-$t-$b-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
ab() { if (( $1 % 2 )); then echo $A $B; else echo $B $A; fi; }
for i in $(seq 1 ${E8:-6}); do for b in $(ab $i); do md $b $i 8 1 e8x1 empty; done; done
for i in $(seq 1 ${S8:-5}); do for b in $(ab $i); do md $b $i 8 1 s8x1 3901; done; done
for i in $(seq 1 ${E4:-4}); do for b in $(ab $i); do md $b $i 4 2 e4x2 empty; done; done
{ for t in e8x1 e4x2 s8x1; do echo "== $t: $A $B"; python3 $AB "$O/$t-*.jsonl" $A $B; done; } > $O/summary.txt
cat $O/summary.txt
for t in e8x1 e4x2 s8x1; do for b in $A $B; do for i in $(seq 1 12); do [ -f $O/$t-$b-$i.jsonl ] && python3 $LAT $O/$t-$b-$i.jsonl "$t $b $i"; done; done; done > $O/lat.txt
for t in e8x1 e4x2 s8x1; do for b in $A $B; do echo "== $t $b longest log work per worker (us), sorted, all rounds"; cat $O/logs-$t-$b-*/s*.log | grep -o "log_work_max_us=[0-9]*" | cut -d= -f2 | sort -n | tr '\n' ' '; echo; echo "   blocks written back / copied in flight, all workers and rounds: $(cat $O/logs-$t-$b-*/s*.log | grep -o 'icache_write_backs=[0-9]*' | awk -F= '{s+=$2} END {print s}') / $(cat $O/logs-$t-$b-*/s*.log | grep -o 'icache_copied_in_flight=[0-9]*' | awk -F= '{s+=$2} END {print s}')"; done; done > $O/logwork.txt
cat $O/logwork.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
