#!/usr/bin/env bash
# usage: phases.sh BIN_DIR OUT.data [bench args...]: perf record -a (realtime clock) over a
# bench run; prints the phase windows (epoch seconds) from the bench's log.
BIN=$1; OUT=$2; shift 2
cd /work/main
PEAKFS_BIN_DIR=$BIN ci/peakfs-cluster.sh --servers 2 -- bash -c "date +%s.%N > $OUT.t0; RUST_LOG=info perf record -k CLOCK_REALTIME -a -g -F 1999 -o $OUT -- \$PEAKFS --master \$PEAKFS_MASTER bench $* 2> $OUT.log; date +%s.%N >> $OUT.t0" 
