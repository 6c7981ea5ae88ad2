#!/usr/bin/env bash
# Call J: as call I's second part (4 servers x 2 workers pinned, clients on cores 8-15), with
# room for the N-1 file after the N-N files.
set -u
O=${1:?}; B=gpu-run/h
nproc; date -u; which perf || echo "no perf"
export PEAKFS_SERVERS=4 PEAKFS_BACKEND=mmap PEAKFS_SERVER_WORKERS=2 PEAKFS_PIN=split PEAKFS_CLIENT_CPUS=8-15
ROUNDS=3 PROCS=8 IOR_MIB=512 OUT=$O/ior-4x2s NVME_BENCH=$B/nvme-bench bash bench/peakfs-ior-ab.sh $B/new $B/zone
date -u
