#!/usr/bin/env bash
# IOR-style data bandwidth of PeakFS builds, alternating (old, new, old, new, ...), each run a
# fresh cluster (ci/peakfs-cluster.sh) running `peakfs bench --only ior-nn --only ior-n1`, and
# the raw file controller under the same transfers (nvme-bench, 256 KiB, same backend) at the
# end of every round: the yardstick of the same run.
# Usage: [ROUNDS=3] [PROCS=2] [IOR_MIB=256] [OUT=DIR] [NVME_BENCH=path] \
#   bash bench/peakfs-ior-ab.sh OLD_BIN_DIR NEW_BIN_DIR [MORE...]
#   (PEAKFS_SERVERS (2), PEAKFS_SERVER_WORKERS, PEAKFS_BACKEND (here mmap), PEAKFS_DATA_MIB,
#   PEAKFS_PIN apply to every build, PEAKFS_CLIENT_CPUS, e.g. 8-15, keeps the bench processes on
#   those cores; JSON lines in OUT/peakfs-ior-ab.jsonl, each run's stderr in
#   OUT/ior-ROUND-BUILD.err, a summary line per run on stdout)
set -u
rounds=${ROUNDS:-3}; procs=${PROCS:-2}; mib=${IOR_MIB:-256}; O=${OUT:-/tmp/peakfs-ior-ab}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
NB=${NVME_BENCH:-$ROOT/target/release/nvme-bench}
export PEAKFS_BACKEND=${PEAKFS_BACKEND:-mmap}
servers=${PEAKFS_SERVERS:-2}
# N-N puts each process's file on one slice whole (hashed): leave room for four on one, and
# for the slice's share of the N-1 file after them, which takes more than its bytes (1.33x
# over 8 slices: a slice's pieces of one 64 KiB block can lie at both ends of it).
export PEAKFS_DATA_MIB=${PEAKFS_DATA_MIB:-$((${PEAKFS_SERVER_WORKERS:-1} * (mib * 7 + 256)))}
mkdir -p "$O"
export TS=${PEAKFS_CLIENT_CPUS:+taskset -c $PEAKFS_CLIENT_CPUS}
summary() {
  python3 - "$@" <<'PY'
import json, sys
b, i, f = sys.argv[1:4]
cells = []
for l in open(f):
    if l.startswith("{"):
        r = json.loads(l)
        cells.append(f"{r['workload']} {r['bytes'] / r['duration_s'] / 1e9:.2f} GB/s")
print(f"round {i} {b:24} " + "  ".join(cells))
PY
}
for i in $(seq "$rounds"); do
  for b in "$@"; do
    PEAKFS_BIN_DIR=$b timeout 300 bash "$ROOT/ci/peakfs-cluster.sh" --servers "$servers" -- \
      bash -c "\$TS \$PEAKFS --master \$PEAKFS_MASTER bench --procs $procs --files 10 --echo-ops 1000 --ior-mib $mib \
        --only ior-nn --only ior-n1 --json" > "$O/ior.tmp" 2>"$O/ior-$i-$(basename "$b").err" \
      || { echo "FAILED $b"; grep -m3 -iE "error|panick" "$O/ior-$i-$(basename "$b").err"; }
    sed "s|^{|{\"ab_bin\":\"$b\",\"ab_round\":$i,|" "$O/ior.tmp" >> "$O/peakfs-ior-ab.jsonl"
    summary "$b" "$i" "$O/ior.tmp"
  done
  if [[ -x $NB ]]; then
    img=/dev/shm/peakfs-ior-raw.img
    rm -f "$img"
    for op in write read; do
      "$NB" --controller "file:$img" --create-mib $((mib * procs)) --backend "$PEAKFS_BACKEND" \
        --threads "$procs" --queues "$servers" --workers "$servers" --inflight 1 --block-size 262144 \
        --op $op --duration 3 --json 2>/dev/null | sed "s|^{|{\"ab_bin\":\"raw\",\"ab_round\":$i,|" > "$O/raw.tmp"
      cat "$O/raw.tmp" >> "$O/peakfs-ior-ab.jsonl"
      summary "raw-$op" "$i" "$O/raw.tmp"
    done
    rm -f "$img"
  fi
done
