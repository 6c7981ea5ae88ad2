#!/usr/bin/env bash
set -u
B=gpu-bundle/bin
nproc; date -u
echo "== PeakFS on loopback: master + 2 servers x 4 workers (unpinned), 8 client processes"
PEAKFS_DATA_MIB=4096 PEAKFS_BIN_DIR=$B PEAKFS_SERVER_WORKERS=4 timeout 300 bash ci/peakfs-cluster.sh --servers 2 -- \
  bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 2000 --ior-mib 32 --echo-ops 100000' 2>&1 | tail -45
echo "== GoFS bench (final engine + batched read), tmpfs image, twice"
for i in 1 2; do
  timeout 200 $B/gofs bench --image /dev/shm/gofs.img --image-mib 1024 --json > ${OUT:-/tmp}/gofs-$i.jsonl 2>/tmp/g.err
  echo "-- run $i rc=$?"; tail -2 /tmp/g.err
  python3 - ${OUT:-/tmp}/gofs-$i.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    try: r=json.loads(l)
    except Exception: continue
    print(f'{r["system"]:8} {r["workload"]:24} {r["iops"]:>12.0f} IOPS {r["gbps"]:7.3f} GB/s ratio_to_raw {r.get("extra",{}).get("ratio_to_raw","-")}')
PY
  rm -f /dev/shm/gofs.img
done
