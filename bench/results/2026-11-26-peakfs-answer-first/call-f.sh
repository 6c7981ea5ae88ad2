#!/usr/bin/env bash
# Call F: `base` (a29724f) against `final2` = call E's `final` + a worker's write-back
# staging buffer mapped and touched when its store opens (room for the log up to 8 MiB and
# the blocks over the dirty limit). Rounds ABBA: 4 x 2 (10) and 8 x 1 (8) empty-file phases.
set -u
O=${1:?}; nproc; date -u
S=bench/results/2026-11-26-peakfs-data-path/summary.py
md() { # build round cluster workers tag only...
  local b=$1 i=$2 c=$3 w=$4 t=$5; shift 5
  local f=$O/$t-$b-$i
  RUST_LOG=info timeout 150 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $c --local-workers $w --local-data-mib 4096 "$@" --local-logs $O/logs-$t-$b-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  python3 $S $f.jsonl "$t $b $i"
  grep -h "worker stopped" $O/logs-$t-$b-$i/s*.log | grep -o "checkpoints=.*" | sort | uniq -c | sort -rn | head -3
}
ab() { if (( $1 % 2 )); then echo base final2; else echo final2 base; fi; }
EMPTY=(--only create-empty --only stat-empty --only remove-empty)
for i in $(seq 1 10); do for b in $(ab $i); do md $b $i 4 2 e4x2 "${EMPTY[@]}"; done; done > $O/e4x2.txt
for i in $(seq 1 8); do for b in $(ab $i); do md $b $i 8 1 e8x1 "${EMPTY[@]}"; done; done > $O/e8x1.txt
AB=bench/results/2026-11-26-peakfs-small-file-write-out/ab.py
{ for t in e4x2 e8x1; do echo "== $t: base final2"; python3 $AB "$O/$t-*.jsonl" base final2; done
  echo "== final2: longest log work between rounds (us), median / max over workers"
  for t in e4x2 e8x1; do grep -ho "log_work_max_us=[0-9]*" $O/logs-$t-final2-*/s*.log | cut -d= -f2 | sort -n | awk -v t=$t '{a[NR]=$1} END {print t, a[int((NR+1)/2)], a[NR], NR" workers"}'; done; } > $O/summary.txt
cat $O/summary.txt; grep -c FAILED $O/*.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
