#!/usr/bin/env bash
# Call F: the slice bench of both builds (fin5 = 7256489, aw = e17dbe9) three times each, the
# empty-file phases of both alternating for ~150 s (4 x 2), and the whole bench of aw twice
# (4 x 2, mmap, as call C of 2026-11-26-peakfs-deferred-create).
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
for i in 1 2 3; do for b in fin5 aw; do
  echo "slice $b $i"; gpu-run/$b/peakfs-slice-bench --files 20000 --rounds 3 --writes 200 2>&1 | grep -E "^(create|write-3901|lookup|unlink|write-262144|write-47008):"
done; done > $O/slice.txt
cat $O/slice.txt
start=$SECONDS; i=0
while (( SECONDS - start < 150 )); do i=$((i+1)); for b in fin5 aw; do
  timeout 100 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --json > $O/empty-$b-$i.jsonl 2> $O/empty-$b-$i.err || { echo FAILED; tail -3 $O/empty-$b-$i.err; }
  sum $O/empty-$b-$i.jsonl "$b $i"
done; done > $O/empty.txt
echo "empty rounds: $i at $((SECONDS - start)) s" >> $O/empty.txt
for i in 1 2; do
  timeout 200 gpu-run/aw/peakfs bench --local-backend mmap --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --json > $O/whole-$i.jsonl 2> $O/whole-$i.err || { echo FAILED; tail -3 $O/whole-$i.err; }
  sum $O/whole-$i.jsonl "whole aw $i"
done | tee $O/whole.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
