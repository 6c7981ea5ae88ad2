#!/usr/bin/env bash
# Call O: PeakFS IOR, dd7a934 (a block's run always starts at the block's first page) against
# the working tree (a run starts at the block's lowest written page), alternating, 4 x 2
# pinned; `peakfs df` after each run shows the space the files took.
set -u
O=${1:?}; B=gpu-run/h
nproc; date -u
export PEAKFS_SERVERS=4 PEAKFS_BACKEND=mmap PEAKFS_SERVER_WORKERS=2 PEAKFS_PIN=split PEAKFS_CLIENT_CPUS=8-15
ROUNDS=3 PROCS=8 IOR_MIB=512 OUT=$O/ior-4x2s NVME_BENCH=$B/nvme-bench bash bench/peakfs-ior-ab.sh $B/zone $B/blk
for v in zone blk; do
  PEAKFS_DATA_MIB=7680 PEAKFS_BIN_DIR=$B/$v timeout 200 bash ci/peakfs-cluster.sh --servers 4 -- bash -c \
    "\$PEAKFS --master \$PEAKFS_MASTER bench --procs 8 --files 10 --echo-ops 1000 --ior-mib 512 --only ior-n1 >/dev/null 2>&1; echo $v; \$PEAKFS --master \$PEAKFS_MASTER df"
done
date -u
