#!/usr/bin/env bash
# Call E: the paper's mdtest setting, stride 1 (each process stats and removes the files of
# the next process), against stride 0 (its own files), build stride (presize + --stride and
# per-size file names), empty files, 8 x 1 and 4 x 2, 3 rounds each, alternating.
set -u
O=${1:?}; nproc; date -u
AB=bench/results/2026-11-26-peakfs-small-file-write-out/ab.py
md() { # stride round cluster workers tag
  local s=$1 i=$2 c=$3 w=$4 t=$5
  local f=$O/$t-s$s-$i
  timeout 150 gpu-run/cow/stride/peakfs bench --local-pin --procs 8 --files 10000 --stride $s --local-cluster $c --local-workers $w --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
ab() { if (( $1 % 2 )); then echo 0 1; else echo 1 0; fi; }
for i in 1 2 3; do for s in $(ab $i); do md $s $i 8 1 e8x1; done; done
for i in 1 2 3; do for s in $(ab $i); do md $s $i 4 2 e4x2; done; done
for t in e8x1 e4x2; do echo "== $t: stride 0 (s0) against stride 1 (s1)"; python3 $AB "$O/$t-*.jsonl" s0 s1; done | tee $O/summary.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -rf *.jsonl *.err && ls
