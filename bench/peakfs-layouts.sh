#!/usr/bin/env bash
# PeakFS server layouts on the 16-core GPU host (CPU only): workers per server and pinning,
# mdtest create/stat against the RPC echo ceiling of the same run.
# Usage: BIN=gpu-run/bin bash bench/peakfs-layouts.sh
set -u
B=${BIN:-gpu-run/bin}
one() { # WORKERS PIN(yes|no)
  local pin=(); [[ $2 == yes ]] && pin=(env PEAKFS_PIN=)
  echo "== $1 workers per server, pinned: $2"
  "${pin[@]}" env PEAKFS_DATA_MIB=4096 PEAKFS_BIN_DIR=$B PEAKFS_SERVER_WORKERS=$1 timeout 200 bash ci/peakfs-cluster.sh --servers 2 -- \
    bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --echo-ops 40000 --only create-empty --only stat-empty' 2>&1 \
    | grep -E "^(echo|mdtest)" 
}
for w in 4 2; do for p in no yes; do one $w $p; done; done
one 8 no
