#!/usr/bin/env bash
# Call H: does the file controller's one thread per server (serving both workers' queues) hold
# the 4 x 2 creates back? aw2 (25a7a25) empty-file phases with the default (one controller
# thread per server) and with --controller-workers=2 (one per worker), alternating ~220 s.
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
run() { # label extra-args...
  local l=$1; shift
  timeout 100 gpu-run/aw2/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --json "$@" > $O/empty-$l-$i.jsonl 2> $O/empty-$l-$i.err || { echo FAILED; tail -3 $O/empty-$l-$i.err; }
  sum $O/empty-$l-$i.jsonl "$l $i"
}
start=$SECONDS; i=0
while (( SECONDS - start < 220 )); do i=$((i+1)); run cw1; run cw2 --local-server-arg=--controller-workers=2; done > $O/empty.txt
echo "rounds: $i at $((SECONDS - start)) s" >> $O/empty.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
