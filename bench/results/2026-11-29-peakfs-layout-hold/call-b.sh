#!/usr/bin/env bash
# Call B: IOR again, with the WRITE's distribution field widened to 4 bytes (layout4,
# gpu-run/layout4/, the committed fix) against base (f2101aa, gpu-run/base2/). In call A the
# 1-byte field (gpu-run/layout/) put a WRITE's data at an odd offset of the server's receive
# buffer, off the controller's direct path. Same bench command as call A; IOR 512 MiB per
# process, base layout4 layout4 base base layout4; then one mdtest pair.
# Usage: call-b.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}; F=${F:-10000}
run() { # NAME BUILD ONLY FILES
  RUST_LOG=peakfs=info timeout 300 gpu-run/$2/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $P --files $4 --ior-mib $IOR --iterations ${ITER:-2} --only $3 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "echo-sync|echo-routed|xfer|ior|create-|stat-"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run ibase1 base2 ior 100; run ilay1 layout4 ior 100; run ilay2 layout4 ior 100; run ibase2 base2 ior 100
run ibase3 base2 ior 100; run ilay3 layout4 ior 100
run mlay1 layout4 mdtest $F; run mbase1 base2 mdtest $F
date -u
cd $O; tar czf /tmp/runs-b.tgz *.jsonl *.err *.logs; rm -rf *.jsonl *.err *.logs; mv /tmp/runs-b.tgz .; ls
