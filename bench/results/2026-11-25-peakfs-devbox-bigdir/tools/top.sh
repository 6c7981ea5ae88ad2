#!/usr/bin/env bash
# top.sh NAME PHASE COMMREGEX [N]: self samples by symbol for threads matching COMM in PHASE, as us/op
NAME=$1; PH=$2; C=$3; N=${4:-25}
read -r _ s e ops < <(python3 /tmp/p/windows.py /tmp/p/$NAME.log | grep "^$PH ")
perf report -i /tmp/p/$NAME.data --time "$s,$e" --no-children --sort sym --comms "$C" --stdio -F overhead,sample,sym -g none 2>/dev/null | grep -v '^#' | grep -v '^$' > /tmp/p/top.tmp
tot=$(awk '{s+=$2} END {print s}' /tmp/p/top.tmp)
echo "$PH $C: total $(echo "$tot/2999/$ops*1000000" | bc -l | xargs printf %.2f) us/op ($tot samples)"
sort -k2 -rn /tmp/p/top.tmp | head -$N | awk -v ops=$ops '{printf "%7.3f us  ", $2/2999/ops*1e6; $1="";$2=""; print}'
