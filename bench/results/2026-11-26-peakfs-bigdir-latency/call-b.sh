#!/usr/bin/env bash
# Call B: a request's cost to its server thread. Build `lat` + each worker's busy time and
# total log work in its stop line, and each process's span in the driver's log. 8 x 1:
# echo phases alone, then with one metadata phase each (busy time over requests,
# differenced), then two whole empty-file runs (ranks' spans).
set -u
O=${1:?}; nproc; date -u
L=bench/results/2026-11-26-peakfs-bigdir-latency/lat.py
md() { # run tag args...
  local i=$1 t=$2; shift 2
  local f=$O/$t-$i
  RUST_LOG=info timeout 150 gpu-run/lat/peakfs bench --local-pin --procs 8 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --files 10000 "$@" --local-logs $O/logs-$t-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  python3 $L $f.jsonl "$t $i"
  grep -h "worker stopped" $O/logs-$t-$i/s*.log | sed 's/\x1b\[[0-9;]*m//g' | grep -o "frames=[0-9]*\|busy_ms=[0-9.]*\|log_work_ms=[0-9.]*" | paste -sd' ' | awk '{r=0;b=0;l=0; for(i=1;i<=NF;i++){split($i,a,"="); if(a[1]=="frames")r+=a[2]; if(a[1]=="busy_ms")b+=a[2]; if(a[1]=="log_work_ms")l+=a[2]} printf "  workers: frames %d busy %.1f ms log %.1f ms -> %.2f us busy per frame\n", r, b, l, b*1000/r}'
  sed 's/\x1b\[[0-9;]*m//g' $f.err | grep "phase done" | sed 's/.*phase=\([^ ]*\).*rank_ms=\(.*\) phase done.*/\1: \2/;s/.*phase=\([^ ]*\).*rank_ms=\(.*\)/  \1: \2/'
}
for i in 1 2; do
  md $i echoes --only none
  md $i create-bigdir --only create-empty-bigdir
  md $i create-private --only create-empty-private
  md $i stat-bigdir --only create-empty-bigdir --only stat-empty-bigdir
done 2>&1 | tee $O/parts.txt
for i in 1 2; do md $i whole --only create-empty --only stat-empty --only remove-empty; done 2>&1 | tee $O/whole.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
