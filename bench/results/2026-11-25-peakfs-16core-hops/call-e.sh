#!/usr/bin/env bash
# Call E: PeakFS bigdir on 16 cores, 4 servers x 2 workers pinned to cores 0-7 (PEAKFS_PIN=split),
# 8 bench processes on cores 8-15; server variants v0..v3 (gpu-run/e/v*/peakfs-server) alternating,
# per run: bench JSON, /proc/stat and per-thread schedstat + context switches of the servers
# before and after the bench, the servers' logs (worker counters at exit).
set -u
O=${OUT:?}/calle; mkdir -p "$O"
ROOT=$(pwd)
nproc; grep -m1 'model name' /proc/cpuinfo; date -u
snap() {
  { grep '^cpu' /proc/stat
    for p in $(pgrep -x peakfs-server) $(pgrep -x peakfs-master); do
      for t in /proc/$p/task/*; do
        echo "T $p ${t##*/} $(cat $t/comm) $(cat $t/schedstat) $(awk '/^(voluntary|nonvoluntary)_ctxt/{printf "%s ", $2}' $t/status)"
      done
    done; } > "$1"
}
export -f snap
export PEAKFS_SERVERS=4 PEAKFS_SERVER_WORKERS=2 PEAKFS_PIN=split PEAKFS_DATA_MIB=2048 PEAKFS_BACKEND=mmap RUST_LOG=${RUST_LOG:-info}
export CLIENT_CPUS
for r in ${ROUNDS_E:-1 2 3}; do
  for v in ${VARIANTS:-v0 v1 v2 v3 v4}; do
    D=$O/$v-r$r; mkdir -p "$D"; export D
    PEAKFS_KEEP_LOGS=$D PEAKFS_BIN_DIR=$ROOT/gpu-run/e/$v timeout 300 bash ci/peakfs-cluster.sh --servers 4 -- \
      bash -c 'snap $D/before; taskset -c ${CLIENT_CPUS:-8-15} $PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files ${FILES_E:-20000} --echo-ops 100000 --only create-empty-bigdir --only stat-empty-bigdir --only create-empty-private --only stat-empty-private --only remove-empty-private --json > $D/bench.json 2>$D/bench.err; snap $D/after' \
      > "$D/cluster.out" 2>&1 || echo "FAILED $v r$r"
    python3 gpu-run/e/summ.py "$D"
  done
done
