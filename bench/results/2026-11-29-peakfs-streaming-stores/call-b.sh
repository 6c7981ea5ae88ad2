#!/usr/bin/env bash
# call-b.sh: the profile of ../2026-11-29-peakfs-profile/call-b.sh again with streaming stores (gpu-run/fp/ built from 8902769 with
# frame pointers), for IOR N-1 (write, read) and N-N (write, read); reads are now PData::read_planned.
# As ../2026-11-29-peakfs-profile/call-a.sh: perf (carried in gpu-run/perf/) samples every CPU (cpu-clock, 999 Hz,
# frame-pointer call chains) during the runs below; each phase's window is found from the
# samples (first to last worker sample in the store's write or read); reports are made
# there, only their text comes back (reports-b.tgz).
# Usage: call-b.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
P=gpu-run/perf; export LD_LIBRARY_PATH=$PWD/$P/lib; PERF=$P/perf
B=${B:-gpu-run/fp}; M=${M:-4096}; IOR=${IOR:-512}; F=${F:-10000}; C=${C:-8}; NP=${NP:-8}
$PERF --version; cat /proc/sys/kernel/perf_event_paranoid
$PERF record -e cpu-clock -a -g -o $O/t.data -- sleep 0.2 > $O/t.err 2>&1; tail -2 $O/t.err
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
window() { # DATA PATTERN -> "start,end" of worker samples whose chain matches PATTERN
  $PERF script -i $1 -F comm,time,ip,sym 2>/dev/null | awk -v pat="$2" '/^ *peakfs-worker/{t=$2; next} /^ *[a-z]/{t=""; next} t!="" && $0 ~ pat {print t}' | tr -d ':' | sort -n | sed -n '1p;$p' | paste -sd,
}
report() { # DATA WINDOW NAME
  local d=$1 w=$2 n=$3
  echo "== $n window $w"
  $PERF report -i $d --time $w --sort comm --stdio -g none 2>/dev/null | grep "%" | head -12 | tee $O/$n.comms
  for c in peakfs-worker0 nvme-worker-0 peakfs; do
    $PERF report -i $d --time $w --comm $c --no-children --percentage relative --sort sym --stdio -g none 2>/dev/null | grep "%" | head -45 > $O/$n.$c.flat
    $PERF report -i $d --time $w --comm $c --children --percentage relative --sort sym --stdio -g none 2>/dev/null | grep "%" | head -90 > $O/$n.$c.children
    $PERF report -i $d --time $w --comm $c --no-children --percentage relative --sort sym --stdio -G --percent-limit 1.5 2>/dev/null | grep -v "^$" | grep -v "^#" | head -900 > $O/$n.$c.graph
    echo "-- $c"; head -25 $O/$n.$c.flat
  done
}
run() { # NAME WHAT PATTERN [PATTERN2 NAME2 PATTERN3 NAME3]
  RUST_LOG=peakfs=info timeout 300 $PERF record -e cpu-clock -F 999 -a -g -o $O/$1.data -- $B/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$1.logs --procs $NP --files $F --ior-mib $IOR --iterations 1 --only $2 --json > $O/$1.jsonl 2> $O/$1.err || { echo "FAILED $1"; tail -3 $O/$1.err; }
  python3 bench/results/2026-11-28-peakfs-final/table.py $O/$1.jsonl | grep -E "echo-sync|echo-routed|xfer|ior|empty"
  local w; w=$(window $O/$1.data "$3"); report $O/$1.data "$w" $1
  if [ $# -gt 3 ]; then
    # Between the first phase's last sample and the third's first: the second phase.
    local w3; w3=$(window $O/$1.data "$4")
    report $O/$1.data "${w#*,},${w3%,*}" $5
  fi
}
run n1 ior-n1 'PStore::write(_keyed|_extent|_batch)?($|::)|PData::write_block'
w=$(window $O/n1.data 'PStore::read(_keyed|_extent)?($|::)|PData::read_planned'); report $O/n1.data "$w" n1read
run nn ior-nn 'PStore::write(_keyed|_extent|_batch)?($|::)|PData::write_block'
w=$(window $O/nn.data 'PStore::read(_keyed|_extent)?($|::)|PData::read_planned'); report $O/nn.data "$w" nnread
date -u
cd $O; rm -f *.data t.err; tar czf /tmp/reports.tgz .; find . -mindepth 1 -delete; mv /tmp/reports.tgz reports-b.tgz; ls
