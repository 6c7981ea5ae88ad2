#!/usr/bin/env bash
# Call E: work (2b28640) against slot (an inode slot counts 8 units of a piece's work, not 1),
# mdtest at 2 M files per phase (8 x 1), in the order work slot slot work: each worker's
# longest checkpoint stops. Usage: call-e.sh OUT
set -u
O=${1:?}; G=gpu-run/stops; mkdir -p $O; nproc; date -u
i=0
for b in work slot slot work; do
  i=$((i + 1)); f=$O/md-$b-$i; mkdir -p $f.logs
  RUST_LOG=info timeout 200 $G/$b/peakfs bench --local-pin --procs 8 --files 250000 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --local-server-arg=--bytes-per-inode=4096 --only create-empty --only stat-empty --only remove-empty --local-logs $f.logs --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  echo "== md $b $i: longest stops per worker (us): take piece last"
  grep -h "worker stopped" $f.logs/s*.log | sed 's/\x1b\[[0-9;]*m//g' | grep -o "checkpoint_take_max_us=[0-9]* checkpoint_piece_max_us=[0-9]* checkpoint_last_max_us=[0-9]*" | sed 's/checkpoint_//g; s/_max_us//g' | tr '\n' ';'; echo
done | tee $O/md.txt
date -u
cd $O && tar czf runs.tgz md-* && rm -rf md-* && ls
