#!/usr/bin/env bash
# Call D: the reply of a forwarded request copied into a new buffer (`copy`, call C) against
# carried back in the request's own buffer, which the communicating thread keeps for its next
# forward (`recycle`: a hop allocates nothing), both with the hop timers, 4 x 2, empty-file
# phases, clients sleeping, 10 rounds ABBA, logs kept.
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
run() { # build round
  local f=$O/empty4x2-$1-$2
  RUST_LOG=info timeout 100 gpu-run/$1/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --local-logs $O/logs-$1-$2 --json > $f.jsonl 2> $f.err || { echo FAILED; tail -3 $f.err; }
  sum $f.jsonl "$1 $2"
}
for i in $(seq 1 10); do
  if (( i % 2 )); then run copy $i; run recycle $i; else run recycle $i; run copy $i; fi
done > $O/empty.txt
for b in copy recycle; do
  echo "== $b: worker stopped lines"
  grep -h "worker stopped" $O/logs-$b-*/s*.log | sed -E 's/.*(worker=[0-9]+).*(requests=[0-9]+) (forwarded=[0-9]+).*(hop_queued_us="[^"]*") (hop_served_us="[^"]*") (hop_us="[^"]*").*/\1 \2 \3 \4 \5 \6/'
done > $O/hop-lines.txt
python3 bench/results/2026-11-26-peakfs-small-file-write-out/ab.py "$O/empty4x2-*.jsonl" copy recycle > $O/summary.txt
cat $O/summary.txt; python3 bench/results/2026-11-26-peakfs-reply-poll/hops.py $O/hop-lines.txt; grep -c FAILED $O/empty.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
