set -u
export OUT=${OUT:-/tmp}
date -u; df -h /dev/shm | tail -1
echo "== swarmio 8 KiB variants"
source bench/swarmio-pinning.sh --functions-only
G8="--initiator gpu --block-size 8192 --threads 16384 --queues 64 --queue-depth 256 --duration 3"
G="$G8" run --target-miops 20 --units 4 --workers 3
G="$G8" run --target-miops 20 --units 4 --workers 3 --fill
G="$G8" run --target-miops 20 --units 4 --workers 3 --fill --huge-pages
G="$G8" run --target-miops 20 --units 2 --workers 7 --fill
G="$G8" run --target-miops 20 --units 2 --workers 7 --fill --huge-pages
echo "== peakfs layouts"
B=gpu-bundle/bin
one() { # SERVERS WORKERS SPIN
  echo "== $1 servers x $2 workers, spin $3 us"
  PEAKFS_SPIN_US=$3 PEAKFS_DATA_MIB=8192 PEAKFS_BIN_DIR=$B PEAKFS_SERVER_WORKERS=$2 timeout 200 bash ci/peakfs-cluster.sh --servers $1 -- \
    bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --echo-ops 40000 --only create-empty --only stat-empty' 2>&1 | grep -E "^(echo|mdtest)|rror"
}
one 4 4 50
one 4 4 200
one 2 8 50
one 8 2 50
one 4 4 50
echo "== full peakfs bench, 4 x 4"
BIN=gpu-bundle/bin PARTS="peakfs" bash bench/cpu-16core.sh
echo "== gofs, three runs"
BIN=gpu-bundle/bin PARTS="gofs" bash bench/cpu-16core.sh
