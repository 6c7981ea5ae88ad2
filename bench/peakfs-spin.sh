#!/usr/bin/env bash
# PeakFS server polling before sleep (`--spin-us`) and workers per server on the 16-core GPU
# host (CPU only): mdtest create/stat, private dirs and one bigdir, against the RPC echo
# ceiling of the same run. 2 servers, 8 client processes, loopback.
# Usage: BIN=gpu-bundle/bin [WORKERS="4 8"] [SPINS="50 1000"] bash bench/peakfs-spin.sh
set -u
B=${BIN:-gpu-bundle/bin}
for w in ${WORKERS:-4 8}; do
  for s in ${SPINS:-50 1000}; do
    echo "== $w workers per server, spin $s us"
    PEAKFS_SPIN_US=$s PEAKFS_DATA_MIB=8192 PEAKFS_BIN_DIR=$B PEAKFS_SERVER_WORKERS=$w timeout 200 \
      bash ci/peakfs-cluster.sh --servers 2 -- \
      bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --echo-ops 40000 --only create-empty --only stat-empty' 2>&1 \
      | grep -E "^(echo|mdtest)"
  done
done
