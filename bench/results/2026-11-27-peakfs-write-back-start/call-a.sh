#!/usr/bin/env bash
# Call A: the empty-file mdtest phases with P bench processes over C servers x W workers
# (P + C*W = 16, --local-pin: workers on cores 0..C*W-1, processes on the rest), 4 rounds, the
# configurations in turn within each round. Build `cur` (head + checkpoint times in the stop
# line).
set -u
O=${1:?}; nproc; date -u
LAT=bench/results/2026-11-26-peakfs-bigdir-latency/lat.py
STOPS=bench/results/2026-11-26-peakfs-bigdir-latency/stops.py
CONFIGS="8:8:1 7:9:1 6:10:1 4:12:1 8:4:2 6:5:2"
md() { # round procs cluster workers
  local i=$1 p=$2 c=$3 w=$4
  local t=p${p}-${c}x${w}-$i
  RUST_LOG=info timeout 150 gpu-run/cur/peakfs bench --local-pin --procs $p --files 10000 --local-cluster $c --local-workers $w --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --local-logs $O/logs-$t --json > $O/$t.jsonl 2> $O/$t.err || { echo FAILED $t; tail -3 $O/$t.err; }
}
for i in 1 2 3 4; do for cfg in $CONFIGS; do IFS=: read p c w <<< "$cfg"; md $i $p $c $w; done; done
for cfg in $CONFIGS; do IFS=: read p c w <<< "$cfg"; for i in 1 2 3 4; do python3 $LAT $O/p${p}-${c}x${w}-$i.jsonl "p$p ${c}x$w $i"; done; done > $O/lat.txt
cat $O/lat.txt
for cfg in $CONFIGS; do IFS=: read p c w <<< "$cfg"; for i in 1 2 3 4; do echo "== p$p ${c}x$w $i"; grep -h "worker stopped" $O/logs-p${p}-${c}x${w}-$i/s*.log | sed 's/.*checkpoints=/checkpoints=/;s/ icache_misses.*log_work_max_us/ log_work_max_us/;s/ log_work_ms.*//'; done; done > $O/stops.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
