#!/usr/bin/env bash
# Call A: the empty-file mdtest phases (private and bigdir) with P bench processes over C
# servers x 1 worker (P + C = 16, --local-pin: workers on cores 0..C-1, processes on the rest),
# 3 rounds, the configurations in turn within each round, 2 iterations a run. Build new10
# (ea688f4). Summary: ../2026-11-27-peakfs-procs/procs.py "OUT/*.jsonl".
set -u
O=${1:?}; mkdir -p $O; nproc; date -u
CONFIGS="8:8 7:9 4:12"
md() { # round procs servers
  local i=$1 p=$2 c=$3 t=s0-${3}x1-${2}-$1
  pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
  timeout 150 gpu-run/new10/peakfs bench --local-pin --procs $p --files 10000 --iterations 2 --local-cluster $c --local-workers 1 --local-data-mib 4096 --local-backend mmap --only create-empty --only stat-empty --only remove-empty --json > $O/$t.jsonl 2> $O/$t.err || { echo FAILED $t; tail -3 $O/$t.err; }
}
for i in 1 2 3; do for cfg in $CONFIGS; do IFS=: read p c <<< "$cfg"; md $i $p $c; done; done
date -u
python3 bench/results/2026-11-27-peakfs-procs/procs.py "$O/*.jsonl" | tee $O/summary.txt
cd $O && tar czf runs.tgz *.jsonl *.err && rm -rf *.jsonl *.err && ls
