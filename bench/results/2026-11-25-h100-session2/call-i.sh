set -u
date -u
B=gpu-bundle/bin
one() { # SERVERS WORKERS SPIN
  echo "== $1 servers x $2 workers, spin $3 us"
  PEAKFS_SPIN_US=$3 PEAKFS_DATA_MIB=8192 PEAKFS_BIN_DIR=$B PEAKFS_SERVER_WORKERS=$2 timeout 200 bash ci/peakfs-cluster.sh --servers $1 -- \
    bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --echo-ops 40000 --only create-empty --only stat-empty' 2>&1 | grep -E "^(echo-sync|mdtest)|rror"
}
for i in 1 2; do
for s in 0 10 50; do one 4 4 $s; one 4 2 $s; done
done
