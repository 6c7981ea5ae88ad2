#!/usr/bin/env bash
# Call A: metadata on 16 cores, 8cd3412 (base5) against the deferred create (def, 70ae1eb),
# alternating rounds until ~470 s have passed: create / stat / remove of empty files, private
# and bigdir (4 servers x 2 workers pinned, 8 processes, 10,000 files each); first the slice
# bench of both builds (server CPU per request, and before its reply).
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
for b in base5 def; do
  echo "== slice $b"; gpu-run/$b/peakfs-slice-bench --files 20000 --rounds 5 --backend mmap --writes 200 2>&1 | grep -E "^(create|lookup|unlink):"
done
start=$SECONDS; i=0
while (( SECONDS - start < 470 )); do i=$((i+1)); for b in base5 def; do
  timeout 200 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --json > $O/md-$b-$i.jsonl 2> $O/md-$b-$i.err || { echo FAILED; tail -3 $O/md-$b-$i.err; }
  sum $O/md-$b-$i.jsonl "$b $i"
done; echo "round $i at $((SECONDS - start)) s"; done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
