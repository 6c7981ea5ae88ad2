#!/usr/bin/env bash
# Call C: the workers' stalls (rounds of log work over 50 us, settle and pump apart, from
# the stop lines) in the bigdir and in private directories. 8 servers x 1 worker, 8
# processes (--local-pin), create / stat / remove of empty files, --iterations 3; RUNS runs
# at 10,000 files per process and one at 40,000 (create and stat only).
# Usage: call-c.sh OUT
set -u
O=${1:?}; G=${G:-gpu-run/stall}; B=${B:-head}; mkdir -p $O; nproc; date -u
run() { # name, bench args...
  local n=$1; shift
  RUST_LOG=info timeout 300 $G/$B/peakfs bench --local-pin --procs 8 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --iterations 3 --local-logs $O/logs-$n --json "$@" > $O/$n.jsonl 2> $O/$n.err || { echo FAILED $n; tail -3 $O/$n.err; }
  echo "== $n"
  python3 -c "
import json,sys
for l in open('$O/$n.jsonl'):
    if l.startswith('{'):
        r=json.loads(l); x=r['extra']; lat=r.get('latency_us') or {}
        print(f\"{r['workload']:30s} {x.get('fraction_of_echo_sync',1):.3f} {r['iops']/1e3:6.0f}K mean {lat.get('mean',0):6.1f} p99 {lat.get('p99',0):6.1f} p999 {lat.get('p999',0):7.1f} max {lat.get('max',0):7.0f}\")
"
  grep -h "worker stopped" $O/logs-$n/s*.log | grep -o "checkpoint_max_us=[0-9]*\|icache_write_backs=[0-9]*\|settle_max[^ ]*\|pump_max[^ ]*" | paste - - - -
}
for i in $(seq 1 ${RUNS:-2}); do
  run ten-$i --files 10000 --only create-empty --only stat-empty --only remove-empty
done
run forty --files 40000 --only create-empty --only stat-empty
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
