#!/usr/bin/env bash
# Call C: base (d70ef82) against drain (a checkpoint is taken by a pump, after the reply, and
# taken or made current only once the staged data pages its log commit would write out are
# written behind). peakfs-slice-bench --files 1000000, then mdtest at 2 M files per phase
# (8 x 1), each in the order base B B base. Usage: [B=drain] call-c.sh OUT
set -u
O=${1:?}; G=gpu-run/stops; B=${B:-drain}; mkdir -p $O; nproc; date -u
for b in base $B $B base; do
  echo "== slice $b"
  timeout 150 $G/$b/peakfs-slice-bench --files 1000000 --rounds 1 --data-mib 8192 --bytes-per-inode 4096 2>&1 | tail -7 | sed 's/(0 other blocks mapped), //; s/ per request//'
done | tee $O/slice.txt
i=0
for b in base $B $B base; do
  i=$((i + 1)); f=$O/md-$b-$i; mkdir -p $f.logs
  RUST_LOG=info timeout 200 $G/$b/peakfs bench --local-pin --procs 8 --files 250000 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --local-server-arg=--bytes-per-inode=4096 --only create-empty --only stat-empty --only remove-empty --local-logs $f.logs --json > $f.jsonl 2> $f.err || { echo FAILED $f; tail -3 $f.err; }
  echo "== md $b $i: longest stops per worker (us): take piece last"
  grep -h "worker stopped" $f.logs/s*.log | sed 's/\x1b\[[0-9;]*m//g' | grep -o "checkpoint_take_max_us=[0-9]* checkpoint_piece_max_us=[0-9]* checkpoint_last_max_us=[0-9]*" | sed 's/checkpoint_//g; s/_max_us//g' | tr '\n' ';'; echo
  python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        r = json.loads(l)
        if r['workload'].startswith('mdtest'):
            print(f\"  {r['workload']:30s} {r['iops']/1e3:6.0f} K/s  {r['extra']['fraction_of_echo_sync']:.3f}  p99.9 {r['latency_us']['p999']:.0f} us  max {r['latency_us']['max']:.0f} us\")" $f.jsonl
done | tee $O/md.txt
date -u
cd $O && tar czf runs.tgz md-* && rm -rf md-* && ls
