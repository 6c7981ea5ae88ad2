#!/usr/bin/env bash
# probes.sh BIN_DIR: bench under perf stat -I of the uprobes; prints per-phase counts
BIN=$1; OUT=/tmp/prof/probes
cd /work/main
PEAKFS_SERVER_WORKERS=2 PEAKFS_BIN_DIR=$BIN ci/peakfs-cluster.sh --servers 2 -- bash -c "date +%s.%N > $OUT.t0; RUST_LOG=info perf stat -x, -I 100 -e 'probe_peakfs:*' -a -o $OUT.stat -- \$PEAKFS --master \$PEAKFS_MASTER bench --procs 4 --files 10000 --echo-ops 50000 --only create-empty --only stat-empty --only remove-empty 2> $OUT.log" >/dev/null 2>&1
t0=$(cat $OUT.t0)
for p in mdtest-create-empty-private mdtest-stat-empty-private mdtest-remove-empty-private mdtest-create-empty-bigdir mdtest-stat-empty-bigdir mdtest-remove-empty-bigdir; do
  line=$(sed 's/\x1b\[[0-9;]*m//g' $OUT.log | grep "phase=$p ")
  end=$(echo "$line" | awk '{print $1}'); wall=$(echo "$line" | sed 's/.*wall=//')
  endS=$(date -d "$end" +%s.%N)
  case $wall in *ms) w=$(echo "${wall%ms} / 1000" | bc -l);; *s) w=${wall%s};; esac
  s=$(echo "$endS - $w - $t0" | bc -l); e=$(echo "$endS - $t0" | bc -l)
  awk -F, -v s=$s -v e=$e -v p=$p '$1>=s && $1<=e+0.1 {c[$4]+=$2} END {printf "%-30s", p; for (k in c) printf " %s=%d", k, c[k]; print ""}' $OUT.stat
done
