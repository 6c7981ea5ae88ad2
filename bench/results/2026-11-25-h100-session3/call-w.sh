set -u
date -u; nproc
B=gpu-bundle/bin
one() { # SERVERS WORKERS PIN CLIENTCPUS
  echo "== peakfs $1 x $2, pin $3, clients on ${4:-any}"
  local pin=(); [[ $3 != unset ]] && pin=(env PEAKFS_PIN=$3)
  local ts=""; [[ -n ${4:-} ]] && ts="taskset -c $4"
  "${pin[@]}" env TS="$ts" PEAKFS_DATA_MIB=8192 PEAKFS_BIN_DIR=$B PEAKFS_SERVER_WORKERS=$2 timeout 200 bash ci/peakfs-cluster.sh --servers $1 -- \
    bash -c '$TS $PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --echo-ops 40000 --only create-empty --only stat-empty' 2>&1 | grep -E "^(echo-sync|mdtest)|rror"
}
for i in 1 2; do
  one 4 4 unset ""
  one 2 2 split 4-15
  one 1 4 split 4-15
  one 2 3 split 6-15
done
