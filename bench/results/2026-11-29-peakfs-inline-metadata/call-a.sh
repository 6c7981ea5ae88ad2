#!/usr/bin/env bash
# Where do inline data queues cost metadata throughput? HEAD build in gpu-run/inl/.
# 1) peakfs-slice-bench (one slice, no network), inline off (a) / on (b), alternating;
# 2) metadata bench 8 x 1 pinned, ABBA, with the servers' stop lines (RUST_LOG info).
# Usage: call-a.sh OUT [files-per-proc] [slice-files]
set -u
O=${1:?}; F=${2:-10000}; S=${3:-100000}; mkdir -p $O; date -u
B=gpu-run/inl; T=bench/results/2026-11-28-peakfs-final/table.py
for r in a b a b b a a b; do
  X=; [ $r = a ] && X=--no-inline-data-queues
  echo "slice $r $(taskset -c 2,3 $B/peakfs-slice-bench --backend mmap --files $S --rounds 5 $X 2>&1 | grep -E '^(create|lookup|unlink):' | awk '{printf "%s %s  ", $1, $2}')"
done
run() { # NAME extra...
  n=$1; shift
  RUST_LOG=peakfs=info timeout 200 $B/peakfs bench ${PIN---local-pin} --local-cluster ${C:-8} --local-workers 1 --local-data-mib ${M:-4096} --local-backend mmap --procs ${P:-8} --files $F --only empty --iterations 3 --json --local-logs $O/$n.logs "$@" > $O/$n.jsonl 2> $O/$n.err || { echo "FAILED $n"; tail -3 $O/$n.err; }
  echo "== $n"; python3 $T $O/$n.jsonl | grep -E "echo-sync|echo-routed|empty"
  grep -h "worker stopped" $O/$n.logs/s*.log | grep -o 'requests=[0-9]*\|busy_ms=[0-9.]*\|settle_max_us_ms_stalls_ms="[^"]*"\|pump_max_us_ms_stalls_ms="[^"]*"\|voluntary_switches=[0-9]*\|involuntary_switches=[0-9]*\|icache_write_backs=[0-9]*' | paste -sd' ' | sed 's/requests=/\n  requests=/g'
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run a1 --local-server-arg=--no-inline-data-queues; run b1; run b2; run a2 --local-server-arg=--no-inline-data-queues
date -u; cd $O && tar czf runs-a.tgz *.jsonl *.err *.logs && rm -rf *.jsonl *.err *.logs
