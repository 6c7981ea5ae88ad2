#!/usr/bin/env bash
# Call G: metadata on 16 cores, 0c86eee (old0, the last stop's end) against this stop's final
# build (fin2), alternating, 4 rounds: create / stat / remove of empty files, private and
# bigdir (the servers' default backend, which old0 cannot change, 8 processes, 10,000 files
# each).
set -u
O=${1:?}; nproc; date -u; df -h /dev/shm | tail -1
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
for i in 1 2 3 4; do for b in old0 fin2; do
  gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --json > $O/md-$b-$i.jsonl 2> $O/md-$b-$i.err || { echo FAILED; tail -3 $O/md-$b-$i.err; }
  sum $O/md-$b-$i.jsonl "$b $i"
done; done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
