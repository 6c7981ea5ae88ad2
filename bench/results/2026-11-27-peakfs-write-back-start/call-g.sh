#!/usr/bin/env bash
# Call G: build `diag2` (data + log lines for log work over 400 us split into settle and pump,
# for write-back starts with the staged pages handed over, for a data pump over 150 us and for
# a write-out start that waited over 100 us; not committed), two 8 x 1 runs of the 3,901-byte
# phases.
set -u; O=${1:?}
for i in 1 2; do
RUST_LOG=info timeout 150 gpu-run/diag2/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --only create-3901 --only stat-3901 --only remove-3901 --local-logs $O/logs-$i --json > $O/r$i.jsonl 2> $O/r$i.err
grep -h "DIAG" $O/logs-$i/*.log | sed 's/^[^ ]* *//' > $O/diag-$i.txt
echo "== run $i: DIAG lines by kind"; sed 's/.*DIAG //; s/ .*//' $O/diag-$i.txt | sort | uniq -c
done
echo "== s0 of run 1"; grep -h "DIAG" $O/logs-1/s0.log | sed 's/^[^ ]* *//' | cut -c1-200
echo "== long log work, all servers, run 1"; grep -h "long log work" $O/logs-1/*.log | grep -o "settle_us=[0-9]* total_us=[0-9]*" | sort -t= -k3 -n | tail -40
cd $O && tar czf runs.tgz r*.jsonl r*.err logs-* diag-*.txt && rm -rf r*.jsonl r*.err logs-* && ls
