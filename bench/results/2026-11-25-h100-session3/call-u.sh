set -u
date -u; nproc
one() { # DIR
  echo "== $1: 4 x 4, spin 50"
  PEAKFS_DATA_MIB=8192 PEAKFS_BIN_DIR=gpu-call/$1 PEAKFS_SERVER_WORKERS=4 timeout 200 bash ci/peakfs-cluster.sh --servers 4 -- \
    bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --echo-ops 40000 --only create-empty --only stat-empty' 2>&1 | grep -E "^(echo-sync|mdtest)|rror"
}
for i in 1 2 3; do one bina; one binb; done
