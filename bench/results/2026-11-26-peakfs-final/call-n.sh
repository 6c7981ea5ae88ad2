#!/usr/bin/env bash
# Call N: the final PeakFS build, the whole `peakfs bench` (echo ceilings, mdtest on empty and
# 3,901-byte files in private directories and the bigdir, IOR N-N and N-1), 8 processes, in
# the two 16-core layouts; then the raw file controller for the IOR yardstick.
set -u
O=${1:?}; B=gpu-run/h
nproc; date -u
run() { # NAME, env set by the caller
  PEAKFS_BACKEND=mmap PEAKFS_BIN_DIR=$B/final timeout 280 bash ci/peakfs-cluster.sh --servers 4 -- \
    bash -c "\${PEAKFS_CLIENT_CPUS:+taskset -c \$PEAKFS_CLIENT_CPUS} \$PEAKFS --master \$PEAKFS_MASTER bench --procs 8 --files 10000 --ior-mib 512 --json" \
    > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; grep -m3 -iE "error|panick" $O/$1.err; }
  python3 - $O/$1.jsonl $1 <<'PY'
import json, sys
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l); f = r.get("extra", {}).get("fraction_of_echo_sync")
        print(f"{sys.argv[2]:6} {r['workload']:32} {r['iops']:12.0f} ops/s {r['gbps']:7.2f} GB/s" + (f"  {f:.3f} of echo-sync" if f is not None and not r['workload'].startswith('ior') else ""))
PY
}
PEAKFS_SERVER_WORKERS=2 PEAKFS_PIN=split PEAKFS_CLIENT_CPUS=8-15 PEAKFS_DATA_MIB=7680 run 4x2s
PEAKFS_SERVER_WORKERS=4 PEAKFS_DATA_MIB=15360 run 4x4
img=/dev/shm/raw.img; rm -f $img
for op in write read; do $B/nvme-bench --controller file:$img --create-mib 4096 --backend mmap --threads 8 --queues 4 --workers 4 --inflight 1 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(IOPS|GB/s)"; done
rm -f $img; date -u
