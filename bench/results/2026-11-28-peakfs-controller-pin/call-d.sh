#!/usr/bin/env bash
# Metadata only (empty files, private and bigdir), ac948a3 (A, gpu-run/cpin/) against
# b7c3183 (B, gpu-run/inline/: inline data queues), 8 x 1 pinned, 4 rounds ABBA BAAB,
# 10,000 files per process, 3 iterations each. Usage: call-d.sh OUT
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
run() { # NAME BUILD
  timeout 150 $2/peakfs bench --local-pin --local-cluster 8 --local-workers 1 --local-data-mib 4096 --local-backend mmap --procs 8 --files 10000 --only empty --iterations 3 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "echo-sync|echo-routed|empty"
}
A=gpu-run/cpin; B=gpu-run/inline
run a1 $A; run b1 $B; run b2 $B; run a2 $A; run b3 $B; run a3 $A; run a4 $A; run b4 $B
date -u; cd $O && tar czf runs-d.tgz *.jsonl *.err && rm -f *.jsonl *.err
