set -u
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; nproc
B=gpu-bundle/bin
echo "== GoFS read-path probe: gofs pread vs direct read vs slot read, one process, 1 controller worker"
$B/readpath_probe 1 2 3
echo "== same, 2 controller workers"
$B/readpath_probe 2 2 3
echo "== gofs bench (reference)"
timeout 200 $B/gofs bench --image /dev/shm/gofs.img --image-mib 1024 --json > $OUT/gofs.jsonl 2>/tmp/g.err; echo rc=$?
python3 - $OUT/gofs.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    r=json.loads(l); x=r.get("extra",{})
    print(f'{r["system"]:8} {r["workload"]:24} {r["iops"]:>10.0f} IOPS p50 {r.get("latency_us",{}).get("p50","-")} ratio_to_raw {x.get("ratio_to_raw","-")}')
PY
rm -f /dev/shm/gofs.img
one() { # PIN
  echo "== peakfs 4 x 4, spin 50, pin: $1"
  local pin=(); [[ $1 != unset ]] && pin=(env PEAKFS_PIN=$1)
  "${pin[@]}" env PEAKFS_DATA_MIB=8192 PEAKFS_BIN_DIR=$B PEAKFS_SERVER_WORKERS=4 timeout 200 bash ci/peakfs-cluster.sh --servers 4 -- \
    bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --echo-ops 40000 --only create-empty --only stat-empty' 2>&1 | grep -E "^(echo|mdtest)|rror"
}
for i in 1 2 3; do one unset; one split; done
