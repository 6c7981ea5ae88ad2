#!/usr/bin/env bash
# Where a metadata operation's client time goes, against an echo's (8 servers x 1 worker on
# cores 0-7, 8 bench processes on cores 8-15, mmap backend).
# gpu-run/fp/: the head with client_sys_us_per_op and client_sleeps_per_op, built with frame
# pointers (RUSTFLAGS="-C force-frame-pointers=yes").
# 1) mdtest, 10,000 empty files per process, 2 iterations, twice;
# 2) the same build under perf (carried in gpu-run/perf/,
#    cpu-clock 999 Hz on every CPU, call chains): the echo phases, then create, stat and
#    remove of 40,000 empty files per process in the bigdir. Windows (perf's clock is the
#    realtime one): the middle 90 % of echo-routed, the bigdir create and the bigdir stat,
#    from the driver's "phase done" log lines. For each window: the clients' (the peakfs
#    processes on CPUs 8-15) and the workers' (CPUs 0-7) flat profiles by symbol, and the
#    clients' by library. Only text comes back.
# Usage: call-a.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
T=bench/results/2026-11-28-peakfs-final/table.py
P=gpu-run/perf; export LD_LIBRARY_PATH=$PWD/$P/lib; PERF=$P/perf
C=${C:-8}; M=${M:-4096}; NP=${NP:-8}; F=${F:-10000}; FP=${FP:-40000}
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
bench() { # BUILD NAME FILES ONLY ITER [PREFIX...]
  local b=$1 n=$2 f=$3 only=$4 it=$5; shift 5
  RUST_LOG=peakfs=info timeout 300 "$@" gpu-run/$b/peakfs bench ${PIN---local-pin} --local-cluster $C --local-workers 1 --local-data-mib $M --local-backend mmap --local-logs $O/$n.logs --procs $NP --files $f --iterations $it --only $only --json > $O/$n.jsonl 2> $O/$n.err || { echo "FAILED $n"; tail -3 $O/$n.err; }
  echo "== $n"; python3 - $O/$n.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l); e = j['extra']; w = j['workload']
    if w.startswith('echo') or ('empty' in w):
        lat = j.get('latency_us') or {}
        print(f"{w:32} {j['iops']:9.0f} {e.get('fraction_of_echo_sync', 0):6.3f}  cpu {e['client_cpu_us_per_op']:6.2f}"
              f"  sys {e.get('client_sys_us_per_op', float('nan')):6.2f}  sleeps {e.get('client_sleeps_per_op', float('nan')):5.2f}"
              f"  p50 {lat.get('p50', float('nan')):6.2f}  mean {lat.get('mean', float('nan')):6.2f}")
PY
}
bench fp u1 $F mdtest 2; bench fp u2 $F mdtest 2
$PERF --version
bench fp prof $FP empty-bigdir 1 $PERF record -k realtime -e cpu-clock -F 999 -a -g -o $O/prof.data --
window() { # PHASE -> "start,end" (perf's realtime seconds): the phase's middle 90 %, from the driver's log
  python3 - $O/prof.err $1 <<'PY'
import re, sys, datetime
for line in open(sys.argv[1]):
    line = re.sub(r'\x1b\[[0-9;]*m', '', line)
    m = re.search(r'^(\S+)Z .*phase done phase=(\S+) .*wall=([0-9.]+)(ms|s|µs)', line)
    if m and m.group(2) == sys.argv[2]:
        end = datetime.datetime.fromisoformat(m.group(1)).replace(tzinfo=datetime.timezone.utc).timestamp()
        wall = float(m.group(3)) * {'ms': 1e-3, 's': 1.0, 'µs': 1e-6}[m.group(4)]
        print(f"{end - 0.95 * wall:.6f},{end - 0.05 * wall:.6f}")
PY
}
for ph in routed:echo-routed stat:mdtest-stat-empty-bigdir create:mdtest-create-empty-bigdir; do
  n=${ph%%:*}; w=$(window "${ph#*:}")
  echo "== $n window $w"
  $PERF report -i $O/prof.data --time $w --cpu 8-15 --comms peakfs --percentage relative -n --no-children --sort sym --stdio -g none 2>/dev/null | grep "%" | head -60 > $O/$n.clients.flat
  $PERF report -i $O/prof.data --time $w --cpu 8-15 --comms peakfs --percentage relative -n --no-children --sort dso --stdio -g none 2>/dev/null | grep "%" | head -20 > $O/$n.clients.dso
  $PERF report -i $O/prof.data --time $w --cpu 8-15 --comms peakfs --percentage relative -n --children --sort sym --stdio -g none 2>/dev/null | grep "%" | head -80 > $O/$n.clients.children
  $PERF report -i $O/prof.data --time $w --cpu 0-7 --percentage relative -n --no-children --sort sym --stdio -g none 2>/dev/null | grep "%" | head -60 > $O/$n.workers.flat
  $PERF report -i $O/prof.data --time $w --cpu 8-15 -n --sort comm --stdio -g none 2>/dev/null | grep "%" | head -5
  echo "-- clients by dso"; head -8 $O/$n.clients.dso; echo "-- clients flat"; head -30 $O/$n.clients.flat
done
date -u
cd $O; rm -f *.data; tar czf /tmp/out.tgz .; find . -mindepth 1 -delete; mv /tmp/out.tgz out-a.tgz; ls
