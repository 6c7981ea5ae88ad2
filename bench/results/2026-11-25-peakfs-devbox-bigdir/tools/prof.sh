#!/usr/bin/env bash
# prof.sh BIN NAME: 1x1 cluster, perf record -a -g (fp) at 2999 Hz over the bench; log for phase windows
BIN=$1; NAME=$2
cd /work/main
PEAKFS_DATA_MIB=4096 PEAKFS_BIN_DIR=$BIN PEAKFS_SERVER_WORKERS=1 timeout 300 ci/peakfs-cluster.sh --servers 1 -- bash -c "RUST_LOG=info perf record -q -k CLOCK_REALTIME -a -g -F 2999 -o /tmp/p/$NAME.data -- \$PEAKFS --master \$PEAKFS_MASTER bench --procs 2 --files 20000 --echo-ops 100000 --only create-empty --only stat-empty ${EXTRA:-}" > /tmp/p/$NAME.out 2> /tmp/p/$NAME.log
grep -E "^(echo|mdtest)" /tmp/p/$NAME.out
