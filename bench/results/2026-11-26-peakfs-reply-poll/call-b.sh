#!/usr/bin/env bash
# Call B: where a forwarded request's time goes. Build `hop` (HEAD + per-worker hop timers,
# logged when a worker stops; bench --local-logs keeps the servers' logs): 4 x 2, empty-file
# phases, clients sleeping (p0) or polling 50 us (p50), 6 alternating rounds, logs kept; then
# head against hop (p0), 10 rounds ABBA, to see what the timers cost.
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
run() { # build variant round [logs]
  local f=$O/empty4x2-$1$2-$3
  RUST_LOG=${4:+info} timeout 100 gpu-run/$1/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --reply-poll-us ${2#p} --only create-empty --only stat-empty --only remove-empty ${4:+--local-logs $O/logs-$2-$3} --json > $f.jsonl 2> $f.err || { echo FAILED; tail -3 $f.err; }
  sum $f.jsonl "$1 $2 $3"
}
for i in 1 2 3 4 5 6; do
  if (( i % 2 )); then run hop p0 $i logs; run hop p50 $i logs; else run hop p50 $i logs; run hop p0 $i logs; fi
done > $O/hops.txt
for v in p0 p50; do
  echo "== $v: worker stopped lines (requests, forwarded, hop mean/p50/p99 us)"
  grep -h "worker stopped" $O/logs-$v-*/s*.log | sed -E 's/.*(worker=[0-9]+).*(requests=[0-9]+) (forwarded=[0-9]+).*(hop_queued_us="[^"]*") (hop_served_us="[^"]*") (hop_us="[^"]*").*/\1 \2 \3 \4 \5 \6/'
done > $O/hop-lines.txt
for i in $(seq 1 10); do
  if (( i % 2 )); then run head p0 $i; run hop p0 $i; else run hop p0 $i; run head p0 $i; fi
done > $O/ab.txt
{ echo "== hop build, p0 against p50"; python3 bench/results/2026-11-26-peakfs-small-file-write-out/ab.py "$O/empty4x2-hop*.jsonl" hopp0 hopp50
  echo "== head against hop, p0"; python3 bench/results/2026-11-26-peakfs-small-file-write-out/ab.py "$O/empty4x2-*p0-*.jsonl" headp0 hopp0; } > $O/summary.txt
cat $O/summary.txt; python3 bench/results/2026-11-26-peakfs-reply-poll/hops.py $O/hop-lines.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
