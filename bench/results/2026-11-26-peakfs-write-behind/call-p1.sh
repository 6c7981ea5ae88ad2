#!/usr/bin/env bash
# Call P1: server-side time per request kind (experiment build: execute() timed per opcode,
# settle and write-behind pump timed), 4x2 pinned, empty-file phases, one phase kind per run.
set -u
O=${1:?}; nproc; date -u
for ph in create-empty stat-empty remove-empty; do for i in 1 2; do
  rm -f /tmp/prof-*.log
  # stat and remove need files: create first in the same run
  only="--only create-empty"; [ $ph != create-empty ] && only="--only create-empty --only $ph"
  gpu-run/pf/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 2048 \
    $only --json > $O/$ph-$i.jsonl 2> $O/$ph-$i.err || { echo FAILED; tail -3 $O/$ph-$i.err; }
  echo -n "$ph-$i: "; python3 gpu-run/pf/line.py $O/$ph-$i.jsonl
  cat /tmp/prof-*.log | awk '{n[$1]+=$2; t[$1]+=$3} END {for (k in n) printf "   key %2d: %9d calls, %8.0f ns avg, %7.1f ms total\n", k, n[k], t[k]/n[k], t[k]/1e6}' | sort -k2 -n
done; done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err
