set -u
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
echo "== peakfs layouts, echo-sync on one server per process"
B=gpu-bundle/bin
one() { # SERVERS WORKERS SPIN
  echo "== $1 servers x $2 workers, spin $3 us"
  PEAKFS_SPIN_US=$3 PEAKFS_DATA_MIB=8192 PEAKFS_BIN_DIR=$B PEAKFS_SERVER_WORKERS=$2 timeout 200 bash ci/peakfs-cluster.sh --servers $1 -- \
    bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --echo-ops 40000 --only create-empty --only stat-empty' 2>&1 | grep -E "^(echo|mdtest)|rror"
}
for i in 1 2; do
one 4 4 50
one 4 2 50
one 8 2 50
one 2 4 50
done
echo "== full peakfs bench, 4 x 4"
BIN=gpu-bundle/bin PARTS="peakfs" bash bench/cpu-16core.sh
