#!/usr/bin/env bash
# Call C: the idle server of base, bell and bell2 (29d848f: the admin thread on a bell of its
# own), 10 s each; a system-wide profile of one bigdir create phase of bell2 if perf is there;
# the empty-file phases of bell and bell2 alternating for ~150 s (4 x 2, 8 procs).
set -u
O=${1:?}; nproc; date -u
sum() { python3 bench/results/2026-11-26-peakfs-data-path/summary.py "$1" "$2"; }
eval "$(sed -n '/^idle()/,/^}/p' bench/results/2026-11-26-peakfs-doorbell-bell/call-a.sh)"
for b in base bell bell2; do idle $b; done | tee $O/idle.txt
B="--local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096"
if command -v perf > /dev/null; then
  perf record -a -F 1999 -o $O/perf.data -- gpu-run/bell2/peakfs bench $B --only create-empty-bigdir --json > $O/perf-run.jsonl 2> $O/perf-run.err
  perf report -i $O/perf.data --sort comm --stdio 2>/dev/null | grep -v "^#" | head -30 > $O/perf-comm.txt
  perf report -i $O/perf.data --comm peakfs-worker0,peakfs-worker1 --sort dso,sym --stdio 2>/dev/null | grep -v "^#" | head -60 > $O/perf-worker.txt
  perf report -i $O/perf.data --comm peakfs --sort dso,sym --stdio 2>/dev/null | grep -v "^#" | head -40 > $O/perf-client.txt
  rm -f $O/perf.data; head -12 $O/perf-comm.txt; head -25 $O/perf-worker.txt
else echo "no perf"; fi
start=$SECONDS; i=0
while (( SECONDS - start < 150 )); do i=$((i+1)); for b in bell bell2; do
  timeout 100 gpu-run/$b/peakfs bench $B --only create-empty --only stat-empty --only remove-empty --json > $O/empty-$b-$i.jsonl 2> $O/empty-$b-$i.err || { echo FAILED; tail -3 $O/empty-$b-$i.err; }
  sum $O/empty-$b-$i.jsonl "$b empty $i"
done; done > $O/empty.txt
echo "empty rounds: $i at $((SECONDS - start)) s" >> $O/empty.txt
python3 bench/results/2026-11-26-peakfs-small-file-write-out/ab.py "$O/empty-*.jsonl" bell bell2 > $O/summary.txt
cat $O/summary.txt; tail -1 $O/empty.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
