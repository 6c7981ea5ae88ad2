#!/usr/bin/env bash
# Controller threads pinned with their workers (8 x 1, 16 cores): the whole `peakfs bench` with
# each server's file-controller thread left to the scheduler (A, as today) and pinned from
# outside to its server's worker core by pin_ctrl.py (B), ABBA. Then the raw file controller.
# Usage: call-a.sh OUT (from the repository root; release binaries of ac948a3 in gpu-run/cpin/).
set -u
O=${1:?}; B=${B:-gpu-run/cpin}; D=bench/results/2026-11-28-peakfs-controller-pin
mkdir -p $O; nproc; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
run() { # NAME PIN(0/1)
  flag=$O/$1.pinning
  if [ $2 = 1 ]; then touch $flag; python3 $D/pin_ctrl.py $flag 2> $O/$1.pin & fi
  RUST_LOG=info timeout 280 $B/peakfs bench --local-pin --local-cluster 8 --local-workers 1 --local-data-mib 4096 --local-backend mmap --local-logs $O/$1-logs --procs 8 --files 10000 --ior-mib 512 --iterations 3 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  rm -f $flag; wait
  echo "== $1"; [ -e $O/$1.pin ] && cat $O/$1.pin; python3 $T $O/$1.jsonl
}
run a1 0; run b1 1; run b2 1; run a2 0
img=/dev/shm/raw.img; rm -f $img
for op in write read; do echo "== raw $op"; $B/nvme-bench --controller file:$img --create-mib 4096 --backend mmap --threads 8 --queues 4 --workers 4 --inflight 1 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(IOPS|GB/s|p99 )"; done | tee $O/raw.txt
rm -f $img; date -u
cd $O && tar czf runs.tgz *.jsonl *.err *.pin *-logs 2>/dev/null && rm -rf *.jsonl *.err *.pin *-logs && ls
