#!/usr/bin/env bash
# The servers' threads other than their workers (file controller, acceptor, memcpy pool,
# signal runtime) left free to run on any core (`base`) against kept on the bench processes'
# cores 8-15 (`aux`: peakfs-server started under taskset, its workers then pinning
# themselves to their --cpus), alternating ABBA. --local-pin, 8 processes, --iterations 3:
# `forty` = create and stat of 40,000 empty files per process on 8 x 1, `ten` = create, stat
# and remove of 10,000 on 8 x 1, `ten4x2` the same on 4 x 2. ROUNDS rounds.
# Usage: call-a.sh OUT (from the repository root; builds in gpu-run/aux/{base,aux})
set -u; shopt -s nullglob
O=${1:?}; G=${G:-gpu-run/aux}; mkdir -p $O; nproc; date -u
S=bench/results/2026-11-28-peakfs-checkpoint-queue/ckpt.py
run() { # build, name, servers, workers, bench args...
  local b=$1 n=$2 s=$3 w=$4; shift 4
  local f=$O/$n-$b
  RUST_LOG=info timeout 300 $G/$b/peakfs bench --local-pin --procs 8 --local-cluster $s --local-workers $w --local-data-mib 4096 --iterations 3 --local-logs $f-logs --json "$@" > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  echo "== $n $b"; python3 $S $f.jsonl $f-logs | grep -v "stat-empty-private\|remove"
}
for i in $(seq 1 ${ROUNDS:-3}); do
  if (( i % 2 )); then o="base aux"; else o="aux base"; fi
  for b in $o; do run $b forty$i 8 1 --files 40000 --only create-empty --only stat-empty; done
  for b in $o; do run $b ten$i 8 1 --files 10000 --only create-empty --only stat-empty --only remove-empty; done
  for b in $o; do run $b tenfourbytwo$i 4 2 --files 10000 --only create-empty --only stat-empty --only remove-empty; done
done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err *-logs && rm -rf *.jsonl *.err *-logs && ls
