set -u
export OUT=${OUT:-/tmp}
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
one() { # BIN_DIR label
  echo "== $2: 4 servers x 4 workers, spin 50 us"
  PEAKFS_SPIN_US=50 PEAKFS_DATA_MIB=8192 PEAKFS_BIN_DIR=$1 PEAKFS_SERVER_WORKERS=4 timeout 200 bash ci/peakfs-cluster.sh --servers 4 -- \
    bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --echo-ops 40000 --only create-empty --only stat-empty' 2>&1 | grep -E "^(echo-sync|mdtest)|rror"
}
for i in 1 2 3; do one gpu-call/pbin "controller yields ~18 ms when idle (241d778)"; one gpu-bundle/bin "controller yields ~1 ms when idle"; done
echo "== gofs A/B"
bash bench/gofs-ab.sh gpu-call/old/gofs gpu-bundle/bin/gofs 2
echo "== swarmio: 40 MIOPS and low-load latency, old then new"
source bench/swarmio-pinning.sh --functions-only
for sw in gpu-call/old/swarmio gpu-bundle/bin/swarmio; do
  echo "-- $sw"
  run --target-miops 40 --units 4 --workers 3
  G="--initiator cpu --threads 1 --inflight 1 --queues 1 --queue-depth 64 --duration 3" \
    run --block-size 512 --target-miops 40 --latency-us 50 --units 1 --workers 1
done
