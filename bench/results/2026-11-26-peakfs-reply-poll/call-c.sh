#!/usr/bin/env bash
# Call C: 1) the forwarded reply copied (`copy`: one allocation of its size, the owner keeps its
# buffer) against handed over (`take`, as before: the owner's next reply grows a new buffer),
# both with the hop timers, 4 x 2, empty-file phases, clients sleeping, 8 rounds ABBA, logs kept;
# 2) IOR and transfer phases (mmap backend, 1 GiB per process) with clients sleeping (p0) or
# polling 50 us (p50), build copy, 2 rounds ABBA.
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
run() { # build round
  local f=$O/empty4x2-$1-$2
  RUST_LOG=info timeout 100 gpu-run/$1/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --local-logs $O/logs-$1-$2 --json > $f.jsonl 2> $f.err || { echo FAILED; tail -3 $f.err; }
  sum $f.jsonl "$1 $2"
}
for i in $(seq 1 8); do
  if (( i % 2 )); then run take $i; run copy $i; else run copy $i; run take $i; fi
done > $O/empty.txt
for b in take copy; do
  echo "== $b: worker stopped lines"
  grep -h "worker stopped" $O/logs-$b-*/s*.log | sed -E 's/.*(worker=[0-9]+).*(requests=[0-9]+) (forwarded=[0-9]+).*(hop_queued_us="[^"]*") (hop_served_us="[^"]*") (hop_us="[^"]*").*/\1 \2 \3 \4 \5 \6/'
done > $O/hop-lines.txt
ior() { # variant round
  timeout 120 gpu-run/copy/peakfs bench --local-backend mmap --local-pin --procs 8 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --reply-poll-us ${1#p} --only xfer-write --only xfer-read --only ior-nn-write --only ior-nn-read --only ior-n1-write --only ior-n1-read --json > $O/ior-$1-$2.jsonl 2> $O/ior-$1-$2.err || { echo FAILED; tail -3 $O/ior-$1-$2.err; }
  sum $O/ior-$1-$2.jsonl "$1 ior $2"
}
{ ior p0 1; ior p50 1; ior p50 2; ior p0 2; } > $O/ior.txt
{ echo "== take against copy (sleeping clients)"; python3 bench/results/2026-11-26-peakfs-small-file-write-out/ab.py "$O/empty4x2-*.jsonl" take copy
  echo "== IOR, copy build: p0 against p50"; python3 bench/results/2026-11-26-peakfs-doorbell-bell/ior_ab.py "$O/ior-*.jsonl" p0 p50; } > $O/summary.txt
cat $O/summary.txt; python3 bench/results/2026-11-26-peakfs-reply-poll/hops.py $O/hop-lines.txt; grep -c FAILED $O/empty.txt $O/ior.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
