#!/usr/bin/env bash
# The file controller's idle back-off in IOR (8 x 1, 16 cores): 2,000 spins + 2,000 yields
# (today), none (sleep on the bell at once: 0,0) and 200 spins; a scratch build whose server
# reads PEAKFS_CTRL_IDLE=spins,yields (gpu-run/idle/, not committed). IOR phases only, 512 MiB
# per process, 2 iterations, rounds alternating. Usage: call-b.sh OUT
set -u
O=${1:?}; B=gpu-run/idle; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
run() { # NAME IDLE
  PEAKFS_CTRL_IDLE=$2 timeout 200 $B/peakfs bench --local-pin --local-cluster 8 --local-workers 1 --local-data-mib 4096 --local-backend mmap --procs 8 --only ior --ior-mib 512 --iterations 2 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1 ($2)"; python3 $T $O/$1.jsonl | grep -E "xfer|ior"
}
for r in 1 2; do run base$r 2000,2000; run sleep$r 0,0; done; run spin1 200,0
date -u; cd $O && tar czf runs-b.tgz *.jsonl *.err && rm -f *.jsonl *.err
