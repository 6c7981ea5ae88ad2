#!/usr/bin/env bash
# spinab.sh OUT ROUNDS SPINS...: final build, 1 server x 1 worker pinned to core 0, 1 bench process on core 1 polling 50 us, alternating worker spin values
O=$1; R=$2; shift 2; mkdir -p $O; cd /work/main
for i in $(seq $R); do for sp in "$@"; do
  PEAKFS_PIN= PEAKFS_SPIN_US=$sp PEAKFS_REPLY_POLL_US=50 PEAKFS_BIN_DIR=/work/peakfs-bin/final2 PEAKFS_SERVER_WORKERS=1 timeout 300 ci/peakfs-cluster.sh --servers 1 -- \
    bash -c "taskset -c 1 \$PEAKFS --master \$PEAKFS_MASTER bench --procs 1 --files 10000 --echo-ops 50000 --only create-empty --only stat-empty --json" 2>/dev/null | grep '^{' | sed "s|^{|{\"ab_bin\":\"spin-$sp\",\"ab_round\":$i,|" > $O/tmp
  cat $O/tmp >> $O/peakfs-ab.jsonl
  python3 -c "
import json
rs={json.loads(l)['workload']:json.loads(l) for l in open('$O/tmp')}
print('round $i spin $sp', ' '.join(f\"{w.replace('mdtest-','').replace('-empty','')} {r['iops']/1e3:.1f}K\" for w,r in rs.items() if w!='echo-pipelined'))"
done; done; rm -f $O/tmp
