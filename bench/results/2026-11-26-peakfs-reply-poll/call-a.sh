#!/usr/bin/env bash
# Call A: clients that poll for their replies (`--reply-poll-us 50`) against clients that sleep
# at once (0, the default), one build (HEAD, gpu-run/head), with the bench processes on cores
# of their own (--local-pin). ABBA order within each pair of rounds. 1) 4 servers x 2 workers,
# empty-file phases, ~230 s; 2) 8 servers x 1 worker, ~50 s; 3) 3,901-byte files 4 x 2, ~60 s.
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
run() { # variant(p0|p50) set(empty|3901) layout(servers workers) round
  local v=$1 s=$2 n=$3 w=$4 i=$5 f=$O/$2$3x$4-$1-$5
  timeout 100 gpu-run/head/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $n --local-workers $w --local-data-mib 4096 --reply-poll-us ${v#p} --only create-$s --only stat-$s --only remove-$s --json > $f.jsonl 2> $f.err || { echo FAILED; tail -3 $f.err; }
  sum $f.jsonl "$v $s ${n}x$w $i"
}
series() { # set servers workers seconds
  local start=$SECONDS i=0
  while (( SECONDS - start < $4 )); do
    i=$((i+1))
    if (( i % 2 )); then run p0 $1 $2 $3 $i; run p50 $1 $2 $3 $i; else run p50 $1 $2 $3 $i; run p0 $1 $2 $3 $i; fi
  done
  echo "$1 ${2}x$3 rounds: $i at $((SECONDS - start)) s"
}
series empty 4 2 230 > $O/empty4x2.txt
series empty 8 1 50 > $O/empty8x1.txt
series 3901 4 2 60 > $O/small4x2.txt
for s in empty4x2 empty8x1 39014x2; do
  echo "== $s"; python3 bench/results/2026-11-26-peakfs-small-file-write-out/ab.py "$O/$s-*.jsonl" p0 p50
done > $O/summary.txt
cat $O/summary.txt; tail -qn1 $O/empty4x2.txt $O/empty8x1.txt $O/small4x2.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
