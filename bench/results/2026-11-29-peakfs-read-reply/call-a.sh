#!/usr/bin/env bash
# READ replies written over the worker's last reply instead of a freshly zeroed buffer (reply,
# gpu-run/reply/) against the build before (plan = 6fd846d, gpu-run/plan/).
# IOR, 8 servers x 1 worker, pinned, 8 processes of 512 MiB, 2 iterations, plan reply reply plan.
# Usage: call-a.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}
run() { # NAME BUILD
  RUST_LOG=peakfs=info timeout 240 gpu-run/$2/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $P --files 100 --ior-mib $IOR --iterations ${ITER:-2} --only ior --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "xfer|ior"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run plan1 plan; run reply1 reply; run reply2 reply; run plan2 plan
date -u
cd $O; tar czf /tmp/runs-a.tgz *.jsonl *.err *.logs; rm -rf *.jsonl *.err *.logs; mv /tmp/runs-a.tgz .; ls
