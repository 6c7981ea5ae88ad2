#!/usr/bin/env bash
# Call I: the write-out's copies moved after the reply (aw3) against aw2 (25a7a25): the slice
# bench twice each, then the 3,901-byte phases alternating for ~170 s (4 x 2).
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
for i in 1 2; do for b in aw2 aw3; do
  echo "slice $b $i"; gpu-run/$b/peakfs-slice-bench --files 20000 --rounds 3 --writes 200 2>&1 | grep -E "^(create|write-3901):"
done; done > $O/slice.txt
start=$SECONDS; i=0
while (( SECONDS - start < 170 )); do i=$((i+1)); for b in aw2 aw3; do
  timeout 100 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-3901 --only stat-3901 --only remove-3901 --json > $O/3901-$b-$i.jsonl 2> $O/3901-$b-$i.err || { echo FAILED; tail -3 $O/3901-$b-$i.err; }
  sum $O/3901-$b-$i.jsonl "$b $i"
done; done > $O/small.txt
echo "rounds: $i at $((SECONDS - start)) s" >> $O/small.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
