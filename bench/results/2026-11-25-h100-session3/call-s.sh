set -u
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; nproc
B=gpu-bundle/bin
ior() { # BACKEND CONTROLLER_WORKERS
  echo "== IOR N-N, 4 servers x 4 workers, backend $1, $2 controller thread(s) per server, 8 procs x 512 MiB"
  PEAKFS_BACKEND=$1 PEAKFS_CONTROLLER_WORKERS=$2 PEAKFS_DATA_MIB=8192 PEAKFS_BIN_DIR=$B PEAKFS_SERVER_WORKERS=4 timeout 250 bash ci/peakfs-cluster.sh --servers 4 -- \
    bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10 --echo-ops 10000 --ior-mib 512 --only ior-nn' 2>&1 | grep -E "^(ior)|rror"
}
for i in 1 2; do ior uring 1; ior mmap 1; ior mmap 2; ior mmap 4; done
echo "== metadata with mmap, 1 controller thread (the data path knob must not cost metadata)"
PEAKFS_BACKEND=mmap PEAKFS_DATA_MIB=8192 PEAKFS_BIN_DIR=$B PEAKFS_SERVER_WORKERS=4 timeout 250 bash ci/peakfs-cluster.sh --servers 4 -- \
  bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --echo-ops 40000 --only create-empty --only stat-empty' 2>&1 | grep -E "^(echo|mdtest)|rror"
echo "== raw file controller, 256 KiB, 8 threads x 4 in flight over 4 queues"
truncate -s 8G /dev/shm/raw.img
for w in 4; do for op in write read; do echo "-- uring, fresh sparse file, $w workers, $op"
  $B/nvme-bench --controller file:/dev/shm/raw.img --backend uring --threads 8 --queues 4 --workers $w --inflight 4 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(IOPS|GB/s)"; done; done
rm -f /dev/shm/raw.img
for w in 4 8; do for op in write read; do echo "-- mmap, filled 8 GiB file, $w workers, $op"
  $B/nvme-bench --controller file:/dev/shm/raw.img --create-mib 8192 --backend mmap --threads 8 --queues $w --workers $w --inflight 4 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(IOPS|GB/s)"; done; done
rm -f /dev/shm/raw.img
