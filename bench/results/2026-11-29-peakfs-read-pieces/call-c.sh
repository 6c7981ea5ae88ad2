#!/usr/bin/env bash
# Fresh runs padded without a zeroed copy of the run (pad, gpu-run/pad/) against 91d3165
# (cur, gpu-run/cur/):
# 1) peakfs-slice-bench (one slice, no network, mmap backend), cur pad pad cur;
# 2) IOR, 8 servers x 1 worker, pinned, 8 processes of 512 MiB, 2 iterations: cur pad pad cur.
# Usage: call-c.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}
for b in cur pad pad cur; do echo "== slice $b"; gpu-run/$b/peakfs-slice-bench --files ${SF:-20000} --writes ${SW:-8000} --data-mib 4096 --backend mmap 2>&1 | grep -E "^write-"; done | tee $O/slice.txt
run() { # NAME BUILD
  RUST_LOG=peakfs=info timeout 240 gpu-run/$2/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $P --files 100 --ior-mib $IOR --iterations ${ITER:-2} --only ior --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "xfer|ior"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run cur1 cur; run pad1 pad; run pad2 pad; run cur2 cur
date -u
cd $O && tar czf runs-c.tgz *.jsonl *.err *.logs && rm -rf *.jsonl *.err *.logs && ls
