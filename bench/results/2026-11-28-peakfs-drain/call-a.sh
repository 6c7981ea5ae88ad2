#!/usr/bin/env bash
# The time-bounded drain (base: 94f603e; new: the drain change), rotating (ABBA...): per
# round, peakfs-slice-bench at a million inodes, then peakfs bench 8 x 1, 8 processes,
# --local-pin, --iterations 2, 40,000 files per process: create and stat of empty files
# ("forty"), then the 3,901-byte phases ("three"). ROUNDS rounds (default 3); no round starts
# after 420 s. Usage: call-a.sh OUT (from the repository root; builds in gpu-run/drain/).
set -u; shopt -s nullglob
O=${1:?}; G=${G:-gpu-run/drain}; mkdir -p $O; nproc; date -u; start=$SECONDS
S=bench/results/2026-11-28-peakfs-drain/drain.py
slice() { # build, round
  $G/$1/peakfs-slice-bench --files 1000000 --rounds 1 --bytes-per-inode 4096 --data-mib 8192 > $O/slice$2-$1.txt 2>&1 || echo FAILED slice $1
  echo "== slice$2 $1"; grep -E "^(create|write|unlink)|checkpoint stops" $O/slice$2-$1.txt | cut -c1-220
}
run() { # build, round, kind, --only filters...
  local f=$O/$3$2-$1 b=$1; shift 3
  RUST_LOG=info timeout 300 $G/$b/peakfs bench --local-pin --procs 8 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --iterations 2 --local-logs $f-logs --json --files 40000 "$@" > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  echo "== $(basename $f)"; python3 $S $f.jsonl $f-logs | grep -v "private\|echo-sync"
}
for i in $(seq 1 ${ROUNDS:-3}); do
  (( SECONDS - start > 420 )) && { echo "stopped before round $i at $((SECONDS - start)) s"; break; }
  set -- ${BUILDS:-base new}
  for _ in $(seq 2 $i); do set -- "${@:$#}" "${@:1:$#-1}"; done
  o="$*"
  for b in $o; do slice $b $i; done
  for b in $o; do run $b $i forty --only create-empty --only stat-empty; done
  for b in $o; do run $b $i three --only 3901; done
done
date -u
python3 $S --summary $O > $O/summary.txt; cat $O/summary.txt
cd $O && tar czf runs.tgz *.txt *.jsonl *.err *-logs && rm -rf slice*.txt *.jsonl *.err *-logs && ls
