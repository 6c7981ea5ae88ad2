#!/usr/bin/env bash
# Reads planned per page (plan, gpu-run/plan/): whole pages straight into the reply, partly
# read pages through a scratch page, one device wait; against the build before (base,
# gpu-run/base/, which read any block with a partial page whole into a zeroed scratch buffer
# and copied it out).
# 1) the CPU topology; 2) IOR, 8 servers x 1 worker, pinned, 8 processes of 512 MiB,
#    2 iterations, base plan plan base; 3) the raw file controller (mmap), 8 and 16 threads.
# Usage: call-a.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
C=${C:-8}; M=${M:-4096}; P=${P:-8}; IOR=${IOR:-512}; RAW=${RAW:-4096}
{ nproc; lscpu; for c in 0 1 8; do echo "cpu$c siblings: $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list)"; done; } > $O/cpu.txt 2>&1
grep -E "^(Thread|Core|Socket|Model name|NUMA node\(s\)|L2|L3)" $O/cpu.txt; grep siblings $O/cpu.txt
run() { # NAME BUILD
  RUST_LOG=peakfs=info timeout 240 gpu-run/$2/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $P --files 100 --ior-mib $IOR --iterations ${ITER:-2} --only ior --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  echo "== $1"; python3 $T $O/$1.jsonl | grep -E "xfer|ior"
}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
run base1 base; run plan1 plan; run plan2 plan; run base2 base
img=/dev/shm/raw.img; rm -f $img
for th in 8 16; do for op in write read; do echo "== raw $op, $th threads"; gpu-run/plan/nvme-bench --controller file:$img --create-mib $RAW --backend mmap --threads $th --queues $((th/2)) --workers $((th/2)) --inflight 1 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(IOPS|GB/s|p99 )"; done; done | tee $O/raw.txt
rm -f $img; date -u
cd $O; tar czf /tmp/runs-a.tgz *.jsonl *.err *.logs; rm -rf *.jsonl *.err *.logs; mv /tmp/runs-a.tgz .; ls
