#!/usr/bin/env bash
# Call E: what waking a sleeping client costs its server thread. 8 x 1, build `lat`: busy
# time per frame of the echo phases alone and of a bigdir create phase (--echo-ops 200),
# clients sleeping in their socket reads (default) against clients polling for 50 us
# (--reply-poll-us 50); then the cost of a first-touch page fault on this machine.
set -u
O=${1:?}; nproc; date -u
L=bench/results/2026-11-26-peakfs-bigdir-latency/lat.py
md() { # run tag args...
  local i=$1 t=$2; shift 2
  local f=$O/$t-$i
  RUST_LOG=info timeout 150 gpu-run/lat/peakfs bench --local-pin --procs 8 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --files 10000 "$@" --local-logs $O/logs-$t-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  python3 $L $f.jsonl "$t $i"
  python3 bench/results/2026-11-26-peakfs-bigdir-latency/stops.py $O/logs-$t-$i
}
for i in 1 2; do
  md $i echoes-sleep --only none
  md $i echoes-poll --only none --reply-poll-us 50
  md $i create-bigdir-sleep --only create-empty-bigdir --echo-ops 200
  md $i create-bigdir-poll --only create-empty-bigdir --echo-ops 200 --reply-poll-us 50
done 2>&1 | tee $O/parts.txt
python3 bench/results/2026-11-26-peakfs-bigdir-latency/faults.py | tee $O/faults.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
