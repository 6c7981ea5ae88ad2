#!/usr/bin/env bash
# Call C: does the owner's wait in a hop come from its socket sends waking sleeping clients?
# Build $G/head; layouts 1 x 8 and 8 x 1 with 8 processes; only the echo phases; bench
# processes that sleep in their reads (--reply-poll-us 0) or poll for 50 us first (50);
# ROUNDS rounds, the two alternating (ABBA).
# Usage: call-c.sh OUT   (from the repository root)
set -u
R=$(cd "$(dirname "$0")" && pwd)
O=${1:?}; G=${G:-gpu-run/routed}; mkdir -p $O; nproc; date -u
ec() { # poll layout round
  local c=${2%x*} w=${2#*x}
  local f=$O/p$1-$2-8-$3
  RUST_LOG=info timeout 200 $G/head/peakfs bench --local-pin --procs 8 --iterations 3 --reply-poll-us $1 --local-cluster $c --local-workers $w --local-data-mib $((4096 * 8 / c)) --only none --local-logs $O/logs-p$1-$2-$3 --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
}
for i in $(seq 1 ${ROUNDS:-3}); do
  if (( i % 2 )); then A=0; B=50; else A=50; B=0; fi
  for l in 1x8 8x1; do ec $A $l $i; ec $B $l $i; done
done
date -u
cd $O || exit 1
for p in 0 50; do for l in 1x8 8x1; do
  echo "== poll $p, $l"
  python3 $R/echoes.py "p$p-$l-8-*.jsonl"
  grep -h "worker stopped" logs-p$p-$l-*/s*.log | grep -o 'hop_queued_us="[^"]*" hop_served_us="[^"]*" hop_us="[^"]*"' | sort > hops-p$p-$l.txt
done; done
tar czf runs.tgz *.jsonl *.err logs-* && rm -rf *.jsonl *.err logs-* && ls
