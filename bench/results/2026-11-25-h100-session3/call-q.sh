set -u
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; nproc
B=gpu-bundle/bin
show() { python3 - "$1" <<'PY'
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l); x=r.get("extra",{})
    if r["system"]=="gofs" and "ratio_to_raw" in x:
        print(f'{r["workload"]:12} {r["iops"]:>9.0f} IOPS p50 {r["latency_us"]["p50"]} raw mean {x["raw_iops"]:.0f} ratio median {x["ratio_to_raw"]:.3f} rounds {[round(v,3) for v in x["ratio_rounds"]]}')
    if "speedup_vs_perfile" in x: print(f'{r["workload"]:24} {r["iops"]:>9.0f} speedup {x["speedup_vs_perfile"]:.2f}x')
PY
}
for i in 1 2; do
  echo "== gofs bench run $i (3 alternating rounds against raw)"
  timeout 200 $B/gofs bench --image /dev/shm/gofs.img --image-mib 1024 --json > $OUT/gofs-$i.jsonl 2>/tmp/g.err; echo rc=$?
  show $OUT/gofs-$i.jsonl; rm -f /dev/shm/gofs.img
done
one() { # SERVERS WORKERS PIN CLIENTCPUS
  echo "== peakfs $1 x $2, pin $3, clients on ${4:-any}"
  local pin=(); [[ $3 != unset ]] && pin=(env PEAKFS_PIN=$3)
  local ts=""; [[ -n ${4:-} ]] && ts="taskset -c $4"
  "${pin[@]}" env TS="$ts" PEAKFS_DATA_MIB=8192 PEAKFS_BIN_DIR=$B PEAKFS_SERVER_WORKERS=$2 timeout 200 bash ci/peakfs-cluster.sh --servers $1 -- \
    bash -c '$TS $PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --echo-ops 40000 --only create-empty --only stat-empty' 2>&1 | grep -E "^(echo|mdtest)|rror"
}
for i in 1 2; do
  one 4 4 unset ""
  one 2 4 split 8-15
  one 4 2 split 8-15
done
echo "== full peakfs bench 4 x 4 (IOR phases)"
BIN=$B PARTS="peakfs" bash bench/cpu-16core.sh 2>&1 | grep -E "^(echo|mdtest|ior)|rror"
echo "== raw file controller, 256 KiB, 4 workers over 4 queues, 8 threads (the servers' 4 controllers together)"
for op in write read; do
  $B/nvme-bench --controller file:/dev/shm/raw.img --create-mib 4096 --threads 8 --queues 4 --workers 4 --inflight 4 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(IOPS|GB/s|p50)"
done
rm -f /dev/shm/raw.img
