#!/usr/bin/env bash
# Metadata only, 8 x 1 pinned, 3 iterations of 10,000 files per process: e234c14's servers
# (gpu-run/inl/) with inline data queues (b) and without (a, --no-inline-data-queues), and
# ac948a3's (c, gpu-run/ac/: before inline queues, call D's A), CBA ABC.
# Usage: call-c.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
run() { # NAME BUILD extra...
  n=$1; B=$2; shift 2
  timeout 200 $B/peakfs bench ${PIN---local-pin} --local-cluster ${C:-8} --local-workers 1 --local-data-mib ${M:-4096} --local-backend mmap --procs ${P:-8} --files ${F:-10000} --only empty --iterations 3 --json "$@" > $O/$n.jsonl 2> $O/$n.err || { echo "FAILED $n"; tail -3 $O/$n.err; }
  echo "== $n"; python3 $T $O/$n.jsonl | grep -E "echo-sync|echo-routed|empty"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
A="gpu-run/inl --local-server-arg=--no-inline-data-queues"
run c1 gpu-run/ac; run b1 gpu-run/inl; run a1 $A; run a2 $A; run b2 gpu-run/inl; run c2 gpu-run/ac
date -u; cd $O && tar czf runs-c.tgz *.jsonl *.err && rm -rf *.jsonl *.err
