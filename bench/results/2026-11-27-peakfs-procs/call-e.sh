#!/usr/bin/env bash
# Call E (and F, with B=ahead2): the log written ahead on the write-back queue (`ahead`; `ahead2`
# also keeps an Icache write-back over the limit from waiting for it) against the build before
# it (`head`, with the same stall counters), alternating ABBA. 8 servers x 1 worker, 8
# processes (--local-pin), --iterations 3: `forty` = create and stat of 40,000 empty files
# per process (left out with FORTY=0), `ten` = create, stat and remove of 10,000. ROUNDS
# rounds of each.
# Usage: call-e.sh OUT
set -u
O=${1:?}; G=${G:-gpu-run/stall}; mkdir -p $O; nproc; date -u
run() { # build name, bench args...
  local b=$1 n=$2; shift 2
  local f=$O/$n-$b
  RUST_LOG=info timeout 300 $G/$b/peakfs bench --local-pin --procs 8 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --iterations 3 --local-logs $f-logs --json "$@" > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  echo "== $n $b"
  python3 -c "
import json
for l in open('$f.jsonl'):
    if l.startswith('{'):
        r=json.loads(l); x=r['extra']; lat=r.get('latency_us') or {}
        if r['workload'].startswith('mdtest') or r['workload']=='echo-sync':
            print(f\"{r['workload']:30s} {x.get('fraction_of_echo_sync',1):.3f} {r['iops']/1e3:6.0f}K mean {lat.get('mean',0):6.1f} p99 {lat.get('p99',0):6.1f} p999 {lat.get('p999',0):7.1f} max {lat.get('max',0):7.0f}\")
"
  grep -h "worker stopped" $f-logs/s*.log | grep -o "settle_max[^ ]*\|pump_max[^ ]*" | paste - - | head -2
}
for i in $(seq 1 ${ROUNDS:-2}); do
  A=${A:-head} B=${B:-ahead}
  if (( i % 2 )); then o="$A $B"; else o="$B $A"; fi
  (( ${FORTY:-1} )) && for b in $o; do run $b forty$i --files 40000 --only create-empty --only stat-empty; done
  for b in $o; do run $b ten$i --files 10000 --only create-empty --only stat-empty --only remove-empty; done
done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err *-logs && rm -rf *.jsonl *.err *-logs && ls
