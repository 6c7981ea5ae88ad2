#!/usr/bin/env bash
# Call G: the empty-file phases of fin5 (7256489) and aw2 (the Icache window restored) alternating
# for ~270 s (4 x 2), then the 3,901-byte phases of both alternating for ~90 s.
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
run() { # build phase-set label
  timeout 100 gpu-run/$1/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-$2 --only stat-$2 --only remove-$2 --json > $O/$2-$1-$3.jsonl 2> $O/$2-$1-$3.err || { echo FAILED; tail -3 $O/$2-$1-$3.err; }
  sum $O/$2-$1-$3.jsonl "$1 $2 $3"
}
start=$SECONDS; i=0
while (( SECONDS - start < 270 )); do i=$((i+1)); for b in fin5 aw2; do run $b empty $i; done; done > $O/empty.txt
echo "empty rounds: $i at $((SECONDS - start)) s" >> $O/empty.txt
start=$SECONDS; i=0
while (( SECONDS - start < 90 )); do i=$((i+1)); for b in fin5 aw2; do run $b 3901 $i; done; done > $O/small.txt
echo "3901 rounds: $i at $((SECONDS - start)) s" >> $O/small.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
