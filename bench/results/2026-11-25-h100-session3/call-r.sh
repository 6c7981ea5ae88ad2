set -u
O=${OUT:-/tmp}
mkdir -p /tmp/p && tar -C /tmp/p -xJf gpu-call/perf.tar.xz
export PERFBIN=/tmp/p/perfpkg/perf PERFLIB=/tmp/p/perfpkg/lib
date -u
echo "== IOR N-N under system-wide sampling, 4 servers x 4 workers, 8 procs x 1024 MiB (write sampled from 1.5 s, read from 6.5 s)"
PEAKFS_DATA_MIB=8192 PEAKFS_BIN_DIR=gpu-call/pbin PEAKFS_SERVER_WORKERS=4 timeout 250 bash ci/peakfs-cluster.sh --servers 4 -- \
  bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10 --echo-ops 10000 --ior-mib 1024 --only ior-nn & B=$!; sleep 1.5; LD_LIBRARY_PATH=$PERFLIB $PERFBIN record -a -g -e cpu-clock -F 1000 -o /tmp/pk-write.data -- sleep 3 2>/dev/null; sleep 2; LD_LIBRARY_PATH=$PERFLIB $PERFBIN record -a -g -e cpu-clock -F 1000 -o /tmp/pk-read.data -- sleep 2.5 2>/dev/null; wait $B' 2>&1 | grep -E "^(echo-sync|ior)|rror"
for phase in write read; do
echo "== $phase: by thread"
LD_LIBRARY_PATH=$PERFLIB $PERFBIN report -i /tmp/pk-$phase.data --no-children --sort comm --stdio -g none 2>/dev/null | grep -E "^ +[0-9]" | head -24
LD_LIBRARY_PATH=$PERFLIB $PERFBIN report -i /tmp/pk-$phase.data --no-children --sort comm,sym --stdio -g none 2>/dev/null | grep -E "^ +[0-9]" | head -80 > $O/perf-ior-$phase.txt
echo "== $phase: by thread and function"
head -45 $O/perf-ior-$phase.txt
done
echo "== raw file controller, uring backend, fresh sparse 8 GiB file, 1 worker 1 queue (one server's controller), 2 threads, 256 KiB"
truncate -s 8G /dev/shm/raw.img
for op in write read; do
  gpu-bundle/bin/nvme-bench --controller file:/dev/shm/raw.img --backend uring --threads 2 --queues 1 --workers 1 --inflight 4 --block-size 262144 --op $op --duration 3 2>&1 | grep -E "^(IOPS|GB/s|p50)"
done
rm -f /dev/shm/raw.img
