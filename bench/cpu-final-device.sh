#!/usr/bin/env bash
# Final CPU-side measurements on the GPU machine's 16 idle cores (session 2).
set -u
B=gpu-bundle/bin
nproc; date -u
echo "== PeakFS on loopback: master + 2 servers x 4 workers (unpinned), 8 client processes"
PEAKFS_BIN_DIR=$B PEAKFS_SERVER_WORKERS=4 timeout 300 bash ci/peakfs-cluster.sh --servers 2 -- \
  bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 4000 --ior-mib 64 --echo-ops 200000' 2>&1 | tail -45
echo "== GoFS bench, before (HEAD engine) and after (read-path changes), tmpfs image"
for g in gofs-before gofs; do
  [ -x $B/$g ] || continue
  timeout 200 $B/$g bench --image /dev/shm/gofs-$g.img --image-mib 1024 --json > ${OUT:-/tmp}/$g.jsonl 2>/tmp/$g.err
  echo "-- $g rc=$?"; tail -3 /tmp/$g.err
  python3 - ${OUT:-/tmp}/$g.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    try: r=json.loads(l)
    except Exception: continue
    print(f'{r["system"]:8} {r["workload"]:24} {r["iops"]:>12.0f} IOPS {r["gbps"]:7.3f} GB/s p50 {r.get("latency_us",{}).get("p50",0):8.2f} us {r.get("notes","")}')
PY
  rm -f /dev/shm/gofs-$g.img
done
echo "== cART vs HashMap, 10 M structured names"
for i in 1 2; do timeout 240 $B/peakfs-cart-bench --names 10000000 2>&1 | tail -12; done
