#!/usr/bin/env bash
# perop.sh NAME: per-phase CPU microseconds per op by thread group (from NAME.data, light perf at 499 Hz x 2 CPUs)
NAME=$1
for p in echo-sync mdtest-create-empty-private mdtest-stat-empty-private mdtest-remove-empty-private mdtest-create-empty-bigdir mdtest-stat-empty-bigdir mdtest-remove-empty-bigdir; do
  line=$(sed 's/\x1b\[[0-9;]*m//g' /tmp/prof/$NAME.data.log | grep "phase=$p ")
  [ -z "$line" ] && continue
  ops=$(echo "$line" | sed 's/.*ops=\([0-9]*\) .*/\1/')
  end=$(echo "$line" | awk '{print $1}'); wall=$(echo "$line" | sed 's/.*wall=//')
  endS=$(date -d "$end" +%s.%N)
  case $wall in *ms) w=$(echo "${wall%ms} / 1000" | bc -l);; *s) w=${wall%s};; esac
  startS=$(echo "$endS - $w" | bc -l)
  perf report -i /tmp/prof/$NAME.data --time "$(printf %.6f $startS),$(printf %.6f $endS)" --sort comm --stdio -F sample,comm 2>/dev/null | grep -v '^#' | grep -v '^$' | awk -v p=$p -v ops=$ops -v w=$w '{c=$2; n=$1; if (c ~ /^peakfs-worker/) c="worker"; else if (c ~ /^nvme|^iou-wrk/) c="nvme"; else if (c=="peakfs") c="client"; else if (c=="swapper") c="idle"; else c="other"; s[c]+=n; t+=n} END {printf "%-30s ops/s %6.0f  us/op:", p, ops/w; for (k in s) printf " %s=%.1f", k, s[k]/499/ops*1e6; printf "  (samples %d, expect %d)\n", t, w*2*499}'
done
