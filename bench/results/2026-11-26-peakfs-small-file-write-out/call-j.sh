#!/usr/bin/env bash
# Call J: aw3 against aw2 again: the slice bench three times each (call I's aw3 creates were
# slower in both of its runs), then the empty-file phases alternating for ~150 s (4 x 2).
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
for i in 1 2 3; do for b in aw3 aw2; do
  echo "slice $b $i"; gpu-run/$b/peakfs-slice-bench --files 20000 --rounds 3 --writes 200 2>&1 | grep -E "^(create|write-3901|lookup|unlink):"
done; done > $O/slice.txt
start=$SECONDS; i=0
while (( SECONDS - start < 150 )); do i=$((i+1)); for b in aw2 aw3; do
  timeout 100 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --json > $O/empty-$b-$i.jsonl 2> $O/empty-$b-$i.err || { echo FAILED; tail -3 $O/empty-$b-$i.err; }
  sum $O/empty-$b-$i.jsonl "$b $i"
done; done > $O/empty.txt
echo "rounds: $i at $((SECONDS - start)) s" >> $O/empty.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
