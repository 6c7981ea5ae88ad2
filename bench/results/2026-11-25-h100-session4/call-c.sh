set -u
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; nproc
echo "== GoFS: gofs bench, old (404ca61) and new alternating, 3 rounds"
S=$(date +%s)
OUT=$OUT bash bench/gofs-ab.sh gpu-run/old/gofs gpu-run/new/gofs 3
echo "gofs took $(( $(date +%s) - S )) s"
echo "== PeakFS metadata layouts, new binaries, 8 client processes, mmap backend, 2 GiB per server"
for run in 1 2; do
for layout in "8 1 unpinned" "8 1 split" "4 2 split" "4 4 unpinned" "4 1 split"; do
  set -- $layout
  if [ "$3" = split ]; then export PEAKFS_PIN=split; else unset PEAKFS_PIN; fi
  echo "-- run $run: $1 servers x $2 workers, $3"
  PEAKFS_BACKEND=mmap PEAKFS_DATA_MIB=2048 PEAKFS_BIN_DIR=gpu-run/new PEAKFS_SERVER_WORKERS=$2 timeout 120 bash ci/peakfs-cluster.sh --servers $1 -- \
    bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --echo-ops 100000 --only create-empty --only stat-empty --only remove-empty' 2>&1 | grep -E "^(echo-sync|mdtest)"
done
done
echo "total $(( $(date +%s) - S )) s"
