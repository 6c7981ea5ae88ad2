#!/usr/bin/env bash
# The 2-core box: RUNS runs of `peakfs bench --iterations 9` (2 servers x 1 worker, 4
# processes, the empty-file phases), each run's medians of the iterations' paired fractions and
# their least and greatest. Usage: devbox-iterations.sh BIN_DIR OUT
set -u
BIN=${1:?}; O=${2:?}; mkdir -p $O; date -u
for i in $(seq 1 ${RUNS:-4}); do
  timeout 900 $BIN/peakfs bench --procs 4 --files 10000 --echo-ops 10000 --iterations 9 --local-cluster 2 --local-workers 1 --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --json 2>$O/run$i.err > $O/run$i.jsonl
  echo "== run $i"
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l); e = r['extra']
        if r['workload'] != 'echo-pipelined':
            print(f\"{r['workload']:30s} {r['iops']:8.0f} ops/s  {e['fraction_of_echo_sync']:.3f} [{e['fraction_of_echo_sync_min']:.3f}-{e['fraction_of_echo_sync_max']:.3f}]\")" $O/run$i.jsonl
done
date -u
