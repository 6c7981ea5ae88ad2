#!/usr/bin/env bash
# Call K: PeakFS IOR, dd7a934 (direct zone transfers) against the working tree (the client
# sends the next read-ahead window at a cache hit), alternating, raw controller each round.
set -u
O=${1:?}; B=gpu-run/h
nproc; date -u
export PEAKFS_SERVERS=4 PEAKFS_BACKEND=mmap PEAKFS_SERVER_WORKERS=4
ROUNDS=3 PROCS=8 IOR_MIB=512 OUT=$O/ior-4x4 NVME_BENCH=$B/nvme-bench bash bench/peakfs-ior-ab.sh $B/zone $B/ra
export PEAKFS_SERVER_WORKERS=2 PEAKFS_PIN=split PEAKFS_CLIENT_CPUS=8-15
ROUNDS=3 PROCS=8 IOR_MIB=512 OUT=$O/ior-4x2s NVME_BENCH=$B/nvme-bench bash bench/peakfs-ior-ab.sh $B/zone $B/ra
date -u
