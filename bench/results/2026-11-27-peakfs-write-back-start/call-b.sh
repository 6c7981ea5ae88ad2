#!/usr/bin/env bash
# Call B: build `diag` (cur + a log line per checkpoint and per Icache write-behind start
# giving the log bytes and blocks staged and where the time went; not committed, see the
# README), two 8 x 1 runs of the empty-file phases.
set -u; O=${1:?}
for i in 1 2; do
RUST_LOG=info timeout 150 gpu-run/diag/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --local-logs $O/logs-$i --json > $O/r$i.jsonl 2> $O/r$i.err
grep -h "DIAG\|phase done" $O/logs-$i/*.log $O/r$i.err | sed 's/^[^ ]* *//' | cut -c1-260
done
