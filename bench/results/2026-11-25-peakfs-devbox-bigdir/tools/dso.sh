#!/usr/bin/env bash
# dso.sh NAME PHASE: us/op by comm and dso in PHASE
NAME=$1; PH=$2
read -r _ s e ops < <(python3 /tmp/p/windows.py /tmp/p/$NAME.log | grep "^$PH ")
echo "== $PH"
perf report -i /tmp/p/$NAME.data --time "$s,$e" --no-children --sort comm,dso --stdio -F sample,comm,dso -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | sort -rn | head -12 | awk -v ops=$ops '{printf "%7.2f us  %s %s\n", $1/2999/ops*1e6, $2, $3}'
