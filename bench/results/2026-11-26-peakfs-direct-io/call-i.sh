#!/usr/bin/env bash
# Call I: PeakFS IOR data bandwidth, HEAD (d41eecd, one 4 KiB command per page through bounce
# slots) against the working tree (direct transfers: one command per 1 MiB, PRPs naming the
# reply / request buffers; whole-page writes without a staging copy; client keeps a one-piece
# reply), alternating; the raw file controller (nvme-bench, same backend, 256 KiB, one per
# thread in flight) each round. Then perf of the new build during IOR N-N.
set -u
O=${1:?}; B=gpu-run/h
nproc; grep -m1 'model name' /proc/cpuinfo; date -u; df -h /dev/shm | tail -1
export PEAKFS_SERVERS=4 PEAKFS_SERVER_WORKERS=4 PEAKFS_BACKEND=mmap
ROUNDS=3 PROCS=8 IOR_MIB=512 OUT=$O/ior-4x4 NVME_BENCH=$B/nvme-bench bash bench/peakfs-ior-ab.sh $B/new $B/zone
export PEAKFS_SERVER_WORKERS=2 PEAKFS_PIN=split PEAKFS_CLIENT_CPUS=8-15
ROUNDS=2 PROCS=8 IOR_MIB=512 OUT=$O/ior-4x2s NVME_BENCH=$B/nvme-bench bash bench/peakfs-ior-ab.sh $B/new $B/zone
unset PEAKFS_PIN PEAKFS_CLIENT_CPUS
export PEAKFS_SERVER_WORKERS=4 PEAKFS_DATA_MIB=9216
for b in new zone; do
PEAKFS_BIN_DIR=$B/$b timeout 200 bash ci/peakfs-cluster.sh --servers 4 -- bash -c \
  "perf record -a -F 499 -o /tmp/perf-$b.data -- \$PEAKFS --master \$PEAKFS_MASTER bench --procs 8 --files 10 --echo-ops 1000 --ior-mib 512 --only ior-nn" 2>&1 | grep -E "^ior|rror"
perf report -i /tmp/perf-$b.data --no-children --sort comm,sym 2>/dev/null | grep -v '^#' | grep -v '^$' | head -60 > $O/perf-$b-sym.txt
perf report -i /tmp/perf-$b.data --no-children --sort comm 2>/dev/null | grep -v '^#' | grep -v '^$' | head -20 > $O/perf-$b-comm.txt
done
date -u
