#!/usr/bin/env bash
# Why a bigdir stat costs more than a private stat and a routed echo (8 servers x 1 worker on
# cores 0-7, 8 bench processes on cores 8-15, mmap backend, empty files).
# gpu-run/prof/prof.tar.xz: fp/ (the head built with RUSTFLAGS="-C force-frame-pointers=yes",
# debug info stripped, symbols kept) and perf/ (Debian 12's perf 6.1 with the libraries it links
# but libc's). Unpacked to /tmp; compressed so that it fits the call's 64 MiB.
# Under perf (cpu-clock 999 Hz on every CPU, call chains): the echo phases, then create and stat
# of 20,000 empty files per process, private and bigdir.
# Windows (perf's clock is the realtime one): the middle 90 % of echo-routed, the private stat
# and the bigdir stat, from the driver's "phase done" log lines. For each: samples by symbol
# for the clients (peakfs processes on CPUs 8-15) and the workers (CPUs 0-7), with counts, so
# that a phase's samples per operation compare (ops and wall time are in the .jsonl).
# Usage: call-a.sh OUT (from the repository root).
set -u
O=${1:?}; mkdir -p $O; date -u
tar xJf gpu-run/prof/prof.tar.xz -C /tmp
P=/tmp/perf; export LD_LIBRARY_PATH=$P/lib; PERF=$P/perf; B=/tmp/fp
$PERF --version || exit 1
pkill -9 -f peakfs-server; rm -rf /dev/shm/peakfs-local-*
bench() { # NAME FILES ONLY [PREFIX...]
  local n=$1 f=$2 only=$3; shift 3
  RUST_LOG=peakfs=info timeout 300 "$@" $B/peakfs bench --local-pin --local-cluster 8 --local-workers 1 --local-data-mib 4096 --local-backend mmap --procs 8 --files $f --only $only --json > $O/$n.jsonl 2> $O/$n.err || { echo "FAILED $n"; tail -3 $O/$n.err; }
  echo "== $n"; python3 - $O/$n.jsonl <<'PY'
import json, sys
for l in open(sys.argv[1]):
    j = json.loads(l); e = j['extra']; lat = j.get('latency_us') or {}
    print(f"{j['workload']:30} ops {j['ops']:8} s {j['duration_s']:6.3f} {j['iops']:9.0f} {e.get('fraction_of_echo_sync', 0):6.3f}"
          f"  cpu {e['client_cpu_us_per_op']:6.2f} sys {e.get('client_sys_us_per_op', 0):6.2f}"
          f"  p50 {lat.get('p50', 0):6.2f} p90 {lat.get('p90', 0):6.2f} mean {lat.get('mean', 0):6.2f}")
PY
}
bench prof 20000 stat-empty $PERF record -k realtime -e cpu-clock -F 999 -a -g -o $O/prof.data --
window() { # PHASE -> "start,end": the phase's middle 90 %, from the driver's log
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
for ph in routed:echo-routed private:mdtest-stat-empty-private bigdir:mdtest-stat-empty-bigdir; do
  n=${ph%%:*}; w=$(window "${ph#*:}")
  echo "== $n window $w"
  r() { $PERF report -i $O/prof.data --time $w -n --no-children --stdio -g none "$@" 2>/dev/null | grep "%"; }
  r --cpu 8-15 --comms peakfs --sort sym | head -70 > $O/$n.clients.flat
  r --cpu 0-7 --sort sym | head -70 > $O/$n.workers.flat
  r --cpu 0-15 --sort comm | head -8
  echo "-- clients"; head -25 $O/$n.clients.flat; echo "-- workers"; head -25 $O/$n.workers.flat
done
date -u
cd $O; rm -f *.data; tar czf /tmp/out.tgz .; find . -mindepth 1 -delete; mv /tmp/out.tgz out-a.tgz; ls
