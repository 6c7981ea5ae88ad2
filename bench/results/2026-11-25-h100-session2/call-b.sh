set -u
export OUT=${OUT:-/tmp}
date -u
echo "== swarmio 8 KiB variants"
source bench/swarmio-pinning.sh --functions-only
G8="--initiator gpu --block-size 8192 --threads 16384 --queues 64 --queue-depth 256 --duration 3"
G="$G8" run --target-miops 20 --units 4 --workers 3
G="$G8" run --target-miops 20 --units 4 --workers 3 --fill --huge-pages
G="$G8" run --target-miops 20 --units 4 --workers 3 --fill --gpu-data direct
G="$G8" run --target-miops 20 --units 2 --workers 7 --fill
G="$G8" run --target-miops 20 --units 4 --workers 3 --fill --pin-threads
G="$G8" run --target-miops 20 --units 2 --workers 7 --fill --huge-pages --pin-threads
echo "== peakfs layouts"
B=gpu-bundle/bin
one() { # SERVERS WORKERS SPIN PIN(yes|no)
  local pin=(); [[ $4 == yes ]] && pin=(env PEAKFS_PIN=)
  echo "== $1 servers x $2 workers, spin $3 us, pinned: $4"
  "${pin[@]}" env PEAKFS_SPIN_US=$3 PEAKFS_DATA_MIB=2048 PEAKFS_BIN_DIR=$B PEAKFS_SERVER_WORKERS=$2 timeout 200 bash ci/peakfs-cluster.sh --servers $1 -- \
    bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --echo-ops 40000 --only create-empty --only stat-empty' 2>&1 | grep -E "^(echo|mdtest)"
}
one 2 8 50 yes
one 4 4 50 no
one 2 8 0 no
one 2 8 200 no
one 2 6 50 no
