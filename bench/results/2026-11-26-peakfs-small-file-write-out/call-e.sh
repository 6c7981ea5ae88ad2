#!/usr/bin/env bash
# Call E: the small-file write-out on the write-back queue (aw = e17dbe9) against the build
# before it (fin5 = 7256489, the behaviour of c4cc508): the slice bench three times each, then
# the 3,901-byte mdtest phases with 4 servers x 2 workers, the two builds alternating for
# ~300 s.
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
for i in 1 2 3; do for b in fin5 aw; do
  echo "slice $b $i"; gpu-run/$b/peakfs-slice-bench --files 20000 --rounds 3 --writes 200 2>&1 | grep -E "^(create|write-3901):"
done; done
start=$SECONDS; i=0
while (( SECONDS - start < 300 )); do i=$((i+1)); for b in fin5 aw; do
  timeout 100 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-3901 --only stat-3901 --only remove-3901 --json > $O/small-$b-$i.jsonl 2> $O/small-$b-$i.err || { echo FAILED; tail -3 $O/small-$b-$i.err; }
  sum $O/small-$b-$i.jsonl "$b $i"
done; done
echo "rounds: $i at $((SECONDS - start)) s"
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
