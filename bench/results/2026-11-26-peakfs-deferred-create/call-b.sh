#!/usr/bin/env bash
# Call B: the deferred create (def, 70ae1eb) against rw2 = def + a worker with requests it
# forwarded outstanding watches its rings up to 2 us for their replies after each round of
# socket calls (instead of making the next round first). Metadata rounds alternating for
# ~300 s (as call A), then IOR (mmap, 1 GiB per process) 3 rounds each.
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
start=$SECONDS; i=0
while (( SECONDS - start < 300 )); do i=$((i+1)); for b in def rw2; do
  timeout 200 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --json > $O/md-$b-$i.jsonl 2> $O/md-$b-$i.err || { echo FAILED; tail -3 $O/md-$b-$i.err; }
  sum $O/md-$b-$i.jsonl "$b $i"
done; done
echo "metadata rounds: $i at $((SECONDS - start)) s"
for i in 1 2 3; do for b in def rw2; do
  timeout 150 gpu-run/$b/peakfs bench --local-backend mmap --local-pin --procs 8 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --only ior --json > $O/ior-$b-$i.jsonl 2> $O/ior-$b-$i.err || { echo FAILED; tail -3 $O/ior-$b-$i.err; }
  sum $O/ior-$b-$i.jsonl "ior $b $i"
done; echo "ior round $i at $((SECONDS - start)) s"; done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
