#!/usr/bin/env bash
# Call A: base (da41fb7) against bell (file controller workers sleep on the registers' bell
# instead of 20 us slices). 1) CPU an idle server uses, 10 s each; 2) empty-file phases
# alternating for ~300 s; 3) 3,901-byte phases alternating for ~100 s (4 x 2, 8 procs).
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
idle() { # build: CPU ticks (1/100 s) of an idle server with 2 workers over 10 s
  d=$(mktemp -d); gpu-run/$1/peakfs-master --listen 127.0.0.1:7911 > $d/m.log 2>&1 & m=$!
  sleep 1; gpu-run/$1/peakfs-server --master 127.0.0.1:7911 --listen 127.0.0.1:7912 --data $d/d.img --workers 2 > $d/s.log 2>&1 & s=$!
  sleep 4; a=$(awk '{print $14+$15}' /proc/$s/stat); sleep 10; b=$(awk '{print $14+$15}' /proc/$s/stat)
  echo "idle $1: $((b - a)) ticks in 10 s"; ps -L -o comm,pcpu -p $s | sort -k2 -rn | head -4 | tr '\n' ' '; echo
  kill $s; wait $s; kill $m; wait $m; rm -rf $d
}
for b in base bell; do idle $b; done | tee $O/idle.txt
run() { # build phase-set round
  timeout 100 gpu-run/$1/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-$2 --only stat-$2 --only remove-$2 --json > $O/$2-$1-$3.jsonl 2> $O/$2-$1-$3.err || { echo FAILED; tail -3 $O/$2-$1-$3.err; }
  sum $O/$2-$1-$3.jsonl "$1 $2 $3"
}
start=$SECONDS; i=0
while (( SECONDS - start < 300 )); do i=$((i+1)); for b in base bell; do run $b empty $i; done; done > $O/empty.txt
echo "empty rounds: $i at $((SECONDS - start)) s" >> $O/empty.txt
start=$SECONDS; i=0
while (( SECONDS - start < 100 )); do i=$((i+1)); for b in base bell; do run $b 3901 $i; done; done > $O/small.txt
echo "3901 rounds: $i at $((SECONDS - start)) s" >> $O/small.txt
python3 bench/results/2026-11-26-peakfs-small-file-write-out/ab.py "$O/empty-*.jsonl" base bell > $O/summary.txt
python3 bench/results/2026-11-26-peakfs-small-file-write-out/ab.py "$O/3901-*.jsonl" base bell >> $O/summary.txt
cat $O/summary.txt; tail -1 $O/empty.txt; tail -1 $O/small.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
