#!/usr/bin/env bash
# slice.sh DATA PHASE [sort]: perf report for the window of PHASE (from DATA.log).
DATA=$1; PHASE=$2; SORT=${3:-comm}
log=$(sed 's/\x1b\[[0-9;]*m//g' $DATA.log | grep "phase done")
end=$(echo "$log" | grep "phase=$PHASE " | awk '{print $1}')
wall=$(echo "$log" | grep "phase=$PHASE " | sed 's/.*wall=//')
endS=$(date -d "$end" +%s.%N)
case $wall in *ms) w=$(echo "${wall%ms} / 1000" | bc -l);; *s) w=${wall%s};; esac
startS=$(echo "$endS - $w" | bc -l)
perf report -i $DATA --time "$(printf %.6f $startS),$(printf %.6f $endS)" --no-children --sort $SORT --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -${4:-25}
