#!/usr/bin/env bash
# cg.sh NAME ONLY-ARGS...: 1x1 cluster with the server and the bench (workers included) under callgrind
NAME=$1; shift
cd /work/main
rm -f /tmp/p/cg-$NAME.*
CG_OUT=/tmp/p/cg-$NAME PEAKFS_BACKEND=psync PEAKFS_DATA_MIB=1024 PEAKFS_BIN_DIR=/work/peakfs-bin/vg PEAKFS_SERVER_WORKERS=1 timeout 1200 ci/peakfs-cluster.sh --servers 1 -- bash -c "RUST_LOG=info CG_OUT=/tmp/p/cg-$NAME \$PEAKFS --master \$PEAKFS_MASTER bench --procs 1 --timeout-ms 60000 --spawn-prefix 'bash /tmp/p/vgw.sh' $*" > /tmp/p/cg-$NAME.out 2> /tmp/p/cg-$NAME.log
grep -E "^(echo|mdtest)" /tmp/p/cg-$NAME.out; ls -la /tmp/p/cg-$NAME.*
