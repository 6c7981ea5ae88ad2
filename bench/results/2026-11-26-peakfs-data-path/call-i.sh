#!/usr/bin/env bash
# Call I: IOR on 16 cores (mmap backend, 1 GiB per process, 4 servers x 2 workers), fin2 against
# fin3 (a forwarded request's reply buffer goes back to the communicating thread as it is,
# not copied), alternating, twice.
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
for i in 1 2; do for b in fin2 fin3; do
  gpu-run/$b/peakfs bench --local-backend mmap --local-pin --procs 8 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --echo-ops 20000 --only ior --json > $O/ior-$b-$i.jsonl 2> $O/ior-$b-$i.err || { echo FAILED; tail -3 $O/ior-$b-$i.err; }
  sum $O/ior-$b-$i.jsonl "$b $i"
done; done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
