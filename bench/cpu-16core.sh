#!/usr/bin/env bash
# GoFS, PeakFS and cART on the GPU machine's 16 CPU cores (no GPU used), binaries in $BIN.
# Usage: BIN=gpu-run/bin [PARTS="gofs cart peakfs"] [RUNS="1 2 3"] bash bench/cpu-16core.sh
# (JSON lines into $OUT or /tmp)
# PeakFS: one full bench per run; PEAKFS_ONLY="create-empty stat-empty" keeps to those phases
# (echo always runs), PEAKFS_BASE_BIN=DIR alternates each run with another build (baseline
# first), PEAKFS_SPREAD_DIRS=1 places new directories by hash as before MKINODE near.
set -u
B=${BIN:-gpu-run/bin}; O=${OUT:-/tmp}; PARTS=${PARTS:-gofs cart peakfs}
nproc; date -u
if [[ " $PARTS " == *" gofs "* ]]; then
echo "== GoFS bench, tmpfs image (4 KiB reads in rounds alternating with the raw controller)"
for i in ${RUNS:-1 2 3}; do
  timeout 200 $B/gofs bench --image /dev/shm/gofs.img --image-mib 1024 --json > $O/gofs-$i.jsonl 2>/tmp/g.err
  echo "-- run $i rc=$?"; tail -2 /tmp/g.err
  python3 - $O/gofs-$i.jsonl <<'PY'
import json,sys
for l in open(sys.argv[1]):
    try: r=json.loads(l)
    except Exception: continue
    x=r.get("extra",{})
    rounds = [round(v, 3) for v in x.get("ratio_rounds", [])]
    same = [round(v, 3) for v in x.get("ratio_rounds_same_span", [])]
    span = r["parameters"].get("span_mib", "")
    print(f'{r["system"]:8} {r["workload"]:24} {r["iops"]:>12.0f} IOPS {r["gbps"]:7.3f} GB/s ratio_to_raw {x.get("ratio_to_raw","-")} rounds {rounds} same-span {x.get("ratio_to_raw_same_span","-")} {same} span_mib {span} speedup {x.get("speedup_vs_perfile","-")}')
PY
  rm -f /dev/shm/gofs.img
done
fi
if [[ " $PARTS " == *" cart "* ]]; then
echo "== cART against HashMap, 10 M names"
timeout 200 $B/peakfs-cart-bench --names 10000000 2>&1 | tail -6
fi
if [[ " $PARTS " == *" peakfs "* ]]; then
# 4 servers x 4 workers measured best on 16 cores (bench/results/2026-11-25-h100/README.md).
# The data files live on /dev/shm: the mmap backend copies in the controller's thread, where
# io_uring punts each buffered tmpfs write to a kernel worker (IOR N-N write 2.5-3x,
# bench/results/2026-11-25-h100-session3/README.md).
# PEAKFS_PIN=split with PEAKFS_CLIENT_CPUS (e.g. 6-15) gives servers and clients separate cores.
S=${PEAKFS_SERVERS:-4} W=${PEAKFS_SERVER_WORKERS:-4} BE=${PEAKFS_BACKEND:-mmap}
export TS=${PEAKFS_CLIENT_CPUS:+taskset -c $PEAKFS_CLIENT_CPUS}
export ONLY=
for o in ${PEAKFS_ONLY:-}; do ONLY+=" --only $o"; done
echo "== PeakFS on loopback: master + $S servers x $W workers ($BE backend, pin ${PEAKFS_PIN-none}), 8 client processes ${TS:+($TS)}"
for i in ${RUNS:-1}; do
  for b in ${PEAKFS_BASE_BIN:-} $B; do
    echo "-- run $i, binaries $b"
    PEAKFS_BACKEND=$BE PEAKFS_DATA_MIB=8192 PEAKFS_BIN_DIR=$b PEAKFS_SERVER_WORKERS=$W timeout 300 bash ci/peakfs-cluster.sh --servers $S -- \
      bash -c '$TS $PEAKFS --master $PEAKFS_MASTER bench --procs 8 --files 10000 --ior-mib 64 --echo-ops 100000 $ONLY' 2>&1 | tail -20
  done
done
fi
