#!/usr/bin/env bash
# Call B: base (da41fb7) against bell. 1) the IOR and transfer phases alternating for ~250 s
# (mmap backend, 1 GiB per process); 2) the 3,901-byte phases alternating for ~150 s
# (4 x 2, 8 procs, as in call A).
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
start=$SECONDS; i=0
while (( SECONDS - start < 250 )); do i=$((i+1)); for b in base bell; do
  timeout 120 gpu-run/$b/peakfs bench --local-backend mmap --local-pin --procs 8 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --only xfer-write --only xfer-read --only ior-nn-write --only ior-nn-read --only ior-n1-write --only ior-n1-read --json > $O/ior-$b-$i.jsonl 2> $O/ior-$b-$i.err || { echo FAILED; tail -3 $O/ior-$b-$i.err; }
  sum $O/ior-$b-$i.jsonl "$b ior $i"
done; done > $O/ior.txt
echo "ior rounds: $i at $((SECONDS - start)) s" >> $O/ior.txt
start=$SECONDS; i=0
while (( SECONDS - start < 150 )); do i=$((i+1)); for b in base bell; do
  timeout 100 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-3901 --only stat-3901 --only remove-3901 --json > $O/3901-$b-$i.jsonl 2> $O/3901-$b-$i.err || { echo FAILED; tail -3 $O/3901-$b-$i.err; }
  sum $O/3901-$b-$i.jsonl "$b 3901 $i"
done; done > $O/small.txt
echo "3901 rounds: $i at $((SECONDS - start)) s" >> $O/small.txt
python3 bench/results/2026-11-26-peakfs-doorbell-bell/ior_ab.py "$O/ior-*.jsonl" base bell > $O/summary.txt
python3 bench/results/2026-11-26-peakfs-small-file-write-out/ab.py "$O/3901-*.jsonl" base bell >> $O/summary.txt
cat $O/summary.txt; tail -1 $O/ior.txt; tail -1 $O/small.txt; grep -c FAILED $O/ior.txt $O/small.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
