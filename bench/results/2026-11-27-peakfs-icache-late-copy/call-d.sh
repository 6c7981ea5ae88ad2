#!/usr/bin/env bash
# Call D: cow (0ad40de) against presize, larger runs: 40,000 empty files per process (each
# worker of 8 x 1 holds 40 K inodes per phase, its inode table growing through 28 K), 8 procs,
# 5 rounds ABBA.
set -u
O=${1:?}; nproc; date -u
AB=bench/results/2026-11-26-peakfs-small-file-write-out/ab.py
LAT=bench/results/2026-11-26-peakfs-bigdir-latency/lat.py
md() { # build round
  local b=$1 i=$2 f=$O/e8x1-$1-$2
  RUST_LOG=info timeout 200 gpu-run/cow/$b/peakfs bench --local-pin --procs 8 --files 40000 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --local-logs $O/logs-e8x1-$b-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
ab() { if (( $1 % 2 )); then echo cow presize; else echo presize cow; fi; }
for i in $(seq 1 5); do for b in $(ab $i); do md $b $i; done; done
{ echo "== e8x1: cow presize"; python3 $AB "$O/e8x1-*.jsonl" cow presize; } > $O/summary.txt
cat $O/summary.txt
for b in cow presize; do for i in $(seq 1 5); do python3 $LAT $O/e8x1-$b-$i.jsonl "e8x1 $b $i"; done; done > $O/lat.txt
for b in cow presize; do echo "== e8x1 $b longest log work per worker (us), sorted, all rounds"; cat $O/logs-e8x1-$b-*/s*.log | grep -o "log_work_max_us=[0-9]*" | cut -d= -f2 | sort -n | tr '\n' ' '; echo; done > $O/logwork.txt
cat $O/logwork.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
