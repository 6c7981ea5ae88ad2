#!/usr/bin/env bash
# run1.sh BIN NAME [procs] [files]: one 1x1 cluster run with the sampler; log in /tmp/p/NAME.log
BIN=$1; NAME=$2; P=${3:-2}; F=${4:-20000}
cd /work/main
python3 /tmp/p/sample.py /tmp/p/$NAME.samples 200 & SP=$!
PEAKFS_DATA_MIB=${PEAKFS_DATA_MIB:-4096} PEAKFS_BIN_DIR=$BIN PEAKFS_SERVER_WORKERS=${W:-1} timeout 300 ci/peakfs-cluster.sh --servers ${S:-1} -- bash -c "RUST_LOG=info \$PEAKFS --master \$PEAKFS_MASTER bench --procs $P --files $F --echo-ops 100000 ${ONLY:---only create-empty --only stat-empty} ${EXTRA:-}" > /tmp/p/$NAME.out 2> /tmp/p/$NAME.log
kill $SP
grep -E "^(echo|mdtest)" /tmp/p/$NAME.out
python3 /tmp/p/perop.py /tmp/p/$NAME.samples /tmp/p/$NAME.log
