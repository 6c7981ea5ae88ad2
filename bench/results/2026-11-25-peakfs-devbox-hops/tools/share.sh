#!/usr/bin/env bash
# share.sh NAME BIN [env...]: light perf over a bench run; per-phase ops/s and CPU shares by thread group
NAME=$1; BIN=$2; shift 2
env "$@" /tmp/prof/phases_light.sh $BIN /tmp/prof/$NAME.data --procs 4 --files 10000 --ior-mib 16 --echo-ops 100000 --only create-empty --only stat-empty --only remove-empty > /tmp/prof/$NAME.out 2>&1
for p in echo-sync mdtest-create-empty-private mdtest-stat-empty-private mdtest-remove-empty-private mdtest-create-empty-bigdir mdtest-stat-empty-bigdir; do
  ops=$(sed 's/\x1b\[[0-9;]*m//g' /tmp/prof/$NAME.data.log | grep "phase=$p " | sed 's/.*ops=\([0-9]*\) wall=\(.*\)/\1 \2/')
  /tmp/prof/slice.sh /tmp/prof/$NAME.data $p comm 40 | awk -v p=$p -v ops="$ops" '{c=$2; sub(/-?[0-9]+$/,"",c); if (c ~ /^peakfs-worker/) c="srv-worker"; else if (c ~ /^nvme|^iou-wrk/) c="nvme+iou"; else if (c=="peakfs") c="client"; else if (c=="swapper") c="idle"; else c="other"; s[c]+=$1} END {printf "%-30s %-22s", p, ops; for (k in s) printf " %s=%.0f%%", k, s[k]; print ""}'
done
