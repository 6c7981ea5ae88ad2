#!/usr/bin/env bash
# Call D: cur against shared again (see call C): the echo phases alone in 4 x 2 (8 rounds, to
# check call C's echo-pipelined drop there), then empty-file phases in 8 x 1 (6 more rounds).
set -u
O=${1:?}; nproc; date -u
AB=bench/results/2026-11-26-peakfs-small-file-write-out/ab.py
md() { # build round cluster workers tag only
  local b=$1 i=$2 c=$3 w=$4 t=$5 z=$6
  local f=$O/$t-$b-$i
  RUST_LOG=info timeout 150 gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $c --local-workers $w --local-data-mib 4096 $z --local-logs $O/logs-$t-$b-$i --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
ab() { if (( $1 % 2 )); then echo cur shared; else echo shared cur; fi; }
for i in $(seq 1 8); do for b in $(ab $i); do md $b $i 4 2 echo4x2 "--only no-such-phase"; done; done
for i in $(seq 1 6); do for b in $(ab $i); do md $b $i 8 1 e8x1 "--only create-empty --only stat-empty --only remove-empty"; done; done
{ for t in echo4x2 e8x1; do echo "== $t: cur shared"; python3 $AB "$O/$t-*.jsonl" cur shared; done; } > $O/summary.txt
cat $O/summary.txt
for b in cur shared; do echo "== e8x1 $b longest log work per worker (us), sorted, all rounds"; cat $O/logs-e8x1-$b-*/s*.log | grep -o "log_work_max_us=[0-9]*" | cut -d= -f2 | sort -n | tr '\n' ' '; echo; done > $O/logwork.txt
cat $O/logwork.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
