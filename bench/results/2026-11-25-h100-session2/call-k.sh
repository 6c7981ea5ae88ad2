set -u
O=${OUT:-/tmp}
mkdir -p /tmp/p && tar -C /tmp/p -xJf gpu-call/perf.tar.xz
export PERF="/tmp/p/perfpkg/perf" LD_LIBRARY_PATH_PERF=/tmp/p/perfpkg/lib
date -u
# mdtest stat (private) under system-wide sampling, 4 servers x 4 workers
PEAKFS_SPIN_US=50 PEAKFS_DATA_MIB=16384 PEAKFS_BIN_DIR=gpu-call/pbin PEAKFS_SERVER_WORKERS=4 timeout 200 bash ci/peakfs-cluster.sh --servers 4 -- \
  bash -c '$PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 60000 --echo-ops 40000 --only create-empty --only stat-empty & B=$!; sleep 2; LD_LIBRARY_PATH=/tmp/p/perfpkg/lib /tmp/p/perfpkg/perf record -a -e cpu-clock -F 2000 -o /tmp/pk.data -- sleep 5 2>/dev/null; wait $B' 2>&1 | grep -E "^(echo-sync|mdtest)|rror"
LD_LIBRARY_PATH=/tmp/p/perfpkg/lib /tmp/p/perfpkg/perf report -i /tmp/pk.data --no-children --sort comm --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -20
LD_LIBRARY_PATH=/tmp/p/perfpkg/lib /tmp/p/perfpkg/perf report -i /tmp/pk.data --no-children --sort comm,sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -70 > $O/perf-peakfs.txt
cat $O/perf-peakfs.txt
