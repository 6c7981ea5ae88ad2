#!/usr/bin/env bash
# The client's CPU per operation (client_cpu_us_per_op) of d303564 (gpu-run/head/): the
# empty-file mdtest phases twice (8 x 1, 10,000 files, 3 iterations) and IOR once (8 x 1,
# 8 processes of 512 MiB, 2 iterations), all pinned.
# Usage: call-d.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
M=${M:-4096}; IOR=${IOR:-512}; F=${F:-10000}
run() { # NAME WHAT
  RUST_LOG=peakfs=info timeout 240 gpu-run/head/peakfs bench ${PIN---local-pin} --local-cluster ${C:-8} --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs ${P:-8} --files $F --ior-mib $IOR --iterations ${ITER:-3} --only $2 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"
  python3 -c '
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l); e = r["extra"]; lat = r.get("latency_us") or {}
    print("%-30s %9.0f ops/s %6.2f GB/s  echo-sync %5s  client CPU/op %6.2f us  p50 %s" % (r["workload"], r["iops"], r["gbps"], "%.3f" % e["fraction_of_echo_sync"] if "fraction_of_echo_sync" in e else "-", e["client_cpu_us_per_op"], lat.get("p50", "-")))
' $O/$1.jsonl
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run md1 empty; run ior ior; run md2 empty
date -u
cd $O && tar czf runs-d.tgz *.jsonl *.err *.logs && rm -rf *.jsonl *.err *.logs && ls
