#!/usr/bin/env bash
# Call B: where a hop's time goes without slice work, and a worker that watches its rings
# longer while a request it forwarded is unanswered. Builds $G/head and $G/watch; layouts
# 1 x 8 and 4 x 2 with 8 processes; only the echo phases (--only none selects no other
# phase), 40,000 echoes per process and phase, --iterations 3; ROUNDS rounds, ABBA order.
# Usage: call-b.sh OUT   (from the repository root)
set -u
R=$(cd "$(dirname "$0")" && pwd)
O=${1:?}; G=${G:-gpu-run/routed}; mkdir -p $O; nproc; date -u
ec() { # build layout round
  local c=${2%x*} w=${2#*x}
  local f=$O/$1-$2-8-$3
  RUST_LOG=info timeout 200 $G/$1/peakfs bench --local-pin --procs 8 --iterations 3 --local-cluster $c --local-workers $w --local-data-mib $((4096 * 8 / c)) --only none --local-logs $O/logs-$1-$2-$3 --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
for i in $(seq 1 ${ROUNDS:-4}); do
  if (( i % 2 )); then A=head; B=watch; else A=watch; B=head; fi
  for l in 1x8 4x2; do ec $A $l $i; ec $B $l $i; done
done
date -u
cd $O || exit 1
for b in head watch; do for l in 1x8 4x2; do
  echo "== $b $l"
  python3 $R/echoes.py "$b-$l-8-*.jsonl"
  grep -h "worker stopped" logs-$b-$l-*/s*.log | grep -o 'hop_queued_us="[^"]*" hop_served_us="[^"]*" hop_us="[^"]*"' | sort | head -40 > hops-$b-$l.txt
done; done
tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
