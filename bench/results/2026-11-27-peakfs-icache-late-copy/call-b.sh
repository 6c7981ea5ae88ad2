#!/usr/bin/env bash
# Call B (diagnostic build, not committed: cow + eprintln timings): what a worker's longest
# log work (settle + pump after a round) consists of now. Each server prints
# "DIAG logwork_us=" for log work over 120 us, and before it "DIAG settle_us=" (over 40 us),
# "DIAG pump data_us= icache_us=" (over 40 us) and "DIAG start walk_us= start_us=" (every
# Icache write-back start: the LRU walk for victims, then the start call).
# Usage: call-b.sh OUT [BUILD_DIR] (gpu-run/diag unless named: call G names gpu-run/diag2,
# whose build also prints the parts of a long settle and each record applied slowly).
set -u
O=${1:?}; G=${2:-gpu-run/diag}; nproc; date -u
run() { # tag cluster workers size
  RUST_LOG=info timeout 150 $G/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $2 --local-workers $3 --local-data-mib 4096 --only create-$4 --only stat-$4 --only remove-$4 --local-logs $O/logs-$1 --json > $O/$1.jsonl 2> $O/$1.err || { echo FAILED $1; tail -3 $O/$1.err; }
}
run e8x1-1 8 1 empty; run e8x1-2 8 1 empty; run s8x1-1 8 1 3901
for t in e8x1-1 e8x1-2 s8x1-1; do
  echo "== $t: each log work over 120 us with the DIAG lines since the one before"
  for f in $O/logs-$t/s*.log; do
    python3 - "$f" <<'PY'
import sys,re
ctx=[]
for l in open(sys.argv[1]):
    if 'DIAG' not in l: continue
    l=l[l.index('DIAG')+5:].strip()
    if l.startswith('logwork'):
        print(l, '<-', ' ; '.join(ctx[-4:]))
        ctx=[]
    else:
        ctx.append(l)
PY
  done | sort -t= -k2 -n -r | head -25
  echo "-- starts: walk_us and start_us quantiles over all workers"
  cat $O/logs-$t/s*.log | grep -o "DIAG start walk_us=[0-9.]* start_us=[0-9.]*" | python3 -c "
import sys,statistics as st
w=[];s=[]
for l in sys.stdin:
    p=dict(x.split('=') for x in l.split()[2:]); w.append(float(p['walk_us'])); s.append(float(p['start_us']))
w.sort(); s.sort(); q=lambda v,f: v[min(len(v)-1,int(f*len(v)))]
print('starts',len(s),'walk p50/p90/max',q(w,.5),q(w,.9),w[-1],'start p50/p90/max',q(s,.5),q(s,.9),s[-1])"
  echo "-- the 10 slowest settle parts and record applies (diag2 only)"
  cat $O/logs-$t/s*.log | grep -o "DIAG settle parts.*\|DIAG apply_us.*" | sort -t= -k2 -n -r | head -10
done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
