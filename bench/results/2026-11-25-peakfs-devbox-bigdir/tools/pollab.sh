#!/usr/bin/env bash
# pollab.sh OUT ROUNDS PROCS CLIENT_CPUS(or -) PIN(yes|no) POLLS...: final build, 1x1, alternating reply-poll values
O=$1; R=$2; P=$3; C=$4; PIN=$5; shift 5; mkdir -p $O; cd /work/main
for i in $(seq $R); do for sp in "$@"; do
  ts=""; [[ $C != - ]] && ts="taskset -c $C"
  pin=(); [[ $PIN == yes ]] && pin=(env PEAKFS_PIN=)
  "${pin[@]}" env PEAKFS_REPLY_POLL_US=$sp PEAKFS_BIN_DIR=/work/peakfs-bin/final2 PEAKFS_SERVER_WORKERS=1 timeout 300 ci/peakfs-cluster.sh --servers 1 -- \
    bash -c "$ts \$PEAKFS --master \$PEAKFS_MASTER bench --procs $P --files 10000 --echo-ops 50000 --only create-empty --only stat-empty --json" 2>/dev/null | grep '^{' | sed "s|^{|{\"ab_bin\":\"poll-$sp\",\"ab_round\":$i,|" > $O/tmp
  cat $O/tmp >> $O/peakfs-ab.jsonl
  python3 -c "
import json,sys
rs={json.loads(l)['workload']:json.loads(l) for l in open('$O/tmp')}
print('round $i poll $sp', ' '.join(f\"{w.replace('mdtest-','').replace('-empty','')} {r['iops']/1e3:.1f}K\" for w,r in rs.items() if w!='echo-pipelined'))"
done; done; rm -f $O/tmp
