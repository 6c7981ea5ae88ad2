#!/usr/bin/env bash
# sys.sh BIN NAME ARGS...: 1x1 cluster, perf record of every syscall (-a) during the bench; counts by comm,syscall
BIN=$1; NAME=$2; shift 2
cd /work/main
PEAKFS_DATA_MIB=4096 PEAKFS_BIN_DIR=$BIN PEAKFS_SERVER_WORKERS=1 timeout 300 ci/peakfs-cluster.sh --servers 1 -- bash -c "perf record -q -a -e raw_syscalls:sys_enter -o /tmp/p/$NAME.data -- \$PEAKFS --master \$PEAKFS_MASTER bench --procs 2 $*" > /tmp/p/$NAME.out 2> /tmp/p/$NAME.log
grep -E "^(echo|mdtest)" /tmp/p/$NAME.out
perf script -i /tmp/p/$NAME.data -F comm,trace 2>/dev/null | awk '{c=$1; for(i=2;i<=NF;i++) if ($i ~ /^NR/) {id=$(i+1)}; n[c" "id]++} END {for (k in n) print n[k], k}' | sort -rn > /tmp/p/$NAME.counts
head -30 /tmp/p/$NAME.counts
