#!/usr/bin/env bash
# Call G: base (2b7d069) against final = lat2 + a relink (unlink, rmdir, rename, link)
# answered before its records are put in place, as a create already was (its dentry removal,
# frees and orphan records wait for the settle after the reply). Rounds ABBA, empty-file
# phases: 8 x 1 and 4 x 2, 8 rounds each. Then the slice bench of final.
set -u
O=${1:?}; nproc; date -u
AB=bench/results/2026-11-26-peakfs-small-file-write-out/ab.py
md() { # build round cluster workers tag
  local b=$1 i=$2 c=$3 w=$4 t=$5
  local f=$O/$t-$b-$i
  RUST_LOG=info timeout 150 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $c --local-workers $w --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --local-logs $O/logs-$t-$b-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
ab() { if (( $1 % 2 )); then echo base final; else echo final base; fi; }
for i in $(seq 1 8); do for b in $(ab $i); do md $b $i 8 1 e8x1; done; done
for i in $(seq 1 8); do for b in $(ab $i); do md $b $i 4 2 e4x2; done; done
{ for t in e8x1 e4x2; do echo "== $t: base final"; python3 $AB "$O/$t-*.jsonl" base final; done; } > $O/summary.txt
cat $O/summary.txt; grep -c FAILED $O/*.txt
for t in e8x1 e4x2; do for i in $(seq 1 8); do python3 bench/results/2026-11-26-peakfs-bigdir-latency/lat.py $O/$t-final-$i.jsonl "$t final $i"; done; done > $O/lat-final.txt
timeout 200 gpu-run/final/peakfs-slice-bench --rounds 3 2>&1 | tail -8 | tee $O/slice.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
