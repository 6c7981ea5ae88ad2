#!/usr/bin/env bash
# Call D: what a worker's pump stalls do. A build with frame pointers (gpu-run/fp), 8
# servers x 1 worker, 8 processes (--local-pin), create of 40,000 empty files per process
# in private directories and in the bigdir, --iterations 3, under `perf record -a -g`; then
# the samples of the workers under PStore::pump (and under Icache write-back and checkpoint
# steps), folded by fold.py.
# Usage: call-d.sh OUT
set -u
O=${1:?}; G=${G:-gpu-run/fp}; mkdir -p $O; nproc; date -u
P=gpu-run/perf/perf; export LD_LIBRARY_PATH=$PWD/gpu-run/perf/lib
F=bench/results/2026-11-27-peakfs-procs/fold.py
$P record -a -g -F 4999 -o $O/d.data -- env RUST_LOG=info timeout 300 $G/peakfs bench --local-pin --procs 8 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --iterations 3 --files 40000 --only create-empty --local-logs $O/logs --json > $O/d.jsonl 2> $O/d.err || { echo FAILED; tail -3 $O/d.err; }
grep -h "worker stopped" $O/logs/s*.log | grep -o "checkpoint_ms=[0-9.]*\|settle_max[^ ]*\|pump_max[^ ]*" | paste - - - | head -4
$P script -i $O/d.data -F comm,tid,time,ip,sym 2>/dev/null > $O/d.script
for r in "PStore::pump" "PStore::settle" "write_checkpoint_step" "Icache::write_back_behind" "Icache::poll_write_behind"; do
  python3 $F peakfs-worker0 "$r" 5 < $O/d.script | head -30 | tee -a $O/fold.txt; echo | tee -a $O/fold.txt
done
$P report -i $O/d.data --comm peakfs-worker0 --children --sort sym --stdio -g none 2>/dev/null | grep -v "^#" | grep -v "^$" | head -100 > $O/children.txt
rm -f $O/d.data $O/d.script
date -u
cd $O && tar czf logs.tgz logs d.err && rm -rf logs d.err && ls
