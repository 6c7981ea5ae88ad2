#!/usr/bin/env bash
# Call B: where a server worker's time goes, with perf (Debian 12's perf 6.1 and its
# libraries carried in gpu-run/perf, the device having none). 8 servers x 1 worker on cores
# 0-7, 8 bench processes on 8-15 (--local-pin). Two runs, each profiled whole (perf record
# -a, no call graphs): `echo` runs the echo phases alone (--only matches nothing), `bigdir`
# adds create and stat of 40,000 empty files per process in the shared directory, 3
# iterations, so that they hold most of the run. perf report per thread kind and symbol.
# Usage: call-b.sh OUT
set -u
O=${1:?}; G=${G:-gpu-run/sweep}; B=${B:-head}; mkdir -p $O; nproc; date -u
P=gpu-run/perf/perf; export LD_LIBRARY_PATH=$PWD/gpu-run/perf/lib
$P stat -e task-clock true 2>&1 | tail -4
run() { # name, bench args...
  local n=$1; shift
  $P record -a -F 2999 -o $O/$n.data -- timeout 300 $G/$B/peakfs bench --local-pin --procs 8 --echo-ops 20000 --local-cluster 8 --local-workers 1 --local-data-mib 4096 --local-logs $O/logs-$n "$@" > $O/$n.txt 2> $O/$n.err || { echo FAILED $n; tail -3 $O/$n.err; }
  tail -14 $O/$n.txt
  grep -h "worker stopped" $O/logs-$n/s*.log | sed 's/.*requests=/requests=/' | cut -c1-60 | head -3
  grep -h "worker stopped" $O/logs-$n/s*.log | grep -o "frames=[0-9]* busy_ms=[0-9.]*" | head -8
  $P report -i $O/$n.data --sort comm,dso --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -25 > $O/$n-dso.txt
  $P report -i $O/$n.data --comm peakfs-worker0 --sort dso,sym --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -70 > $O/$n-w0.txt
  $P report -i $O/$n.data --comm peakfs --sort dso,sym --stdio 2>/dev/null | grep -v "^#" | grep -v "^$" | head -40 > $O/$n-client.txt
  rm -f $O/$n.data
}
run echo --only nothing-matches-this --iterations 3
run bigdir --files 40000 --iterations 3 --only create-empty-bigdir --only stat-empty-bigdir
date -u
cd $O && tar czf logs.tgz logs-* *.err && rm -rf logs-* *.err && ls
