#!/usr/bin/env bash
# PeakFS metadata against the echo ceilings in several server layouts, old and new builds
# alternating within each layout (bench/peakfs-ab.sh), 8 client processes: where the bigdir's
# distance to echo-sync comes from. echo-spread (new builds) sends its echoes the way the
# bigdir spreads its requests, so per layout
#   echo-spread / echo-sync   what spreading one process's requests over the servers costs,
#   bigdir / echo-spread      what a bigdir operation costs beyond such an echo (server and
#                             client work per request, and the hop to the owning worker).
# Layouts: SxW = S servers x W workers, unpinned, clients anywhere; SxWs = the same with
# PEAKFS_PIN=split (server i's workers on cores i*W..i*W+W-1) and the clients on the cores
# after them (none left: anywhere).
# Usage: [LAYOUTS="4x4 4x1s 4x2s"] [ROUNDS=2] [OUT=DIR] bash bench/peakfs-bigdir-layouts.sh OLD NEW
#   (PEAKFS_BACKEND, PEAKFS_DATA_MIB (here 2048), PEAKFS_SPIN_US apply to every run; JSON lines
#   in OUT/LAYOUT/peakfs-ab.jsonl; at the end, medians per layout and build;
#   `bash bench/peakfs-bigdir-layouts.sh --table OUT` prints them again)
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
O=${OUT:-/tmp/peakfs-bigdir-layouts}
export PEAKFS_DATA_MIB=${PEAKFS_DATA_MIB:-2048}
table() {
  python3 - "$1" <<'PY'
import glob, json, os, statistics, sys
phases = ["echo-sync", "echo-spread", "mdtest-create-empty-private", "mdtest-stat-empty-private",
          "mdtest-create-empty-bigdir", "mdtest-stat-empty-bigdir"]
short = lambda w: w.replace("mdtest-", "").replace("-empty", "")
print(f"{'layout':7} {'build':28} runs  " + "  ".join(f"{short(p):>20}" for p in phases))
for f in sorted(glob.glob(os.path.join(sys.argv[1], "*", "peakfs-ab.jsonl"))):
    runs = {}
    for l in open(f):
        r = json.loads(l)
        runs.setdefault(r["ab_bin"], {}).setdefault(r["workload"], []).append(r)
    for b, ws in runs.items():
        cells = []
        for p in phases:
            rs = ws.get(p, [])
            if not rs:
                cells.append(f"{'-':>20}")
            elif p == "echo-sync":
                cells.append(f"{statistics.median(r['iops'] for r in rs) / 1e3:17.0f} K ")
            else:
                fr = [r["extra"]["fraction_of_echo_sync"] for r in rs]
                cells.append(f"{statistics.median(fr):.2f} ({min(fr):.2f}-{max(fr):.2f})".rjust(20))
        n = len(ws.get("echo-sync", []))
        print(f"{os.path.basename(os.path.dirname(f)):7} {os.path.basename(b.rstrip('/')):28} {n:4}  " + "  ".join(cells))
PY
}
if [[ ${1:-} == --table ]]; then table "$2"; exit; fi
cores=$(nproc)
for layout in ${LAYOUTS:-4x4 4x1s 4x2s}; do
  [[ $layout =~ ^([0-9]+)x([0-9]+)(s?)$ ]] || { echo "bad layout $layout" >&2; exit 2; }
  s=${BASH_REMATCH[1]} w=${BASH_REMATCH[2]} split=${BASH_REMATCH[3]}
  echo "== $layout: $s servers x $w workers${split:+, split pinning}"
  (
    export PEAKFS_SERVERS=$s PEAKFS_SERVER_WORKERS=$w OUT=$O/$layout PROCS=8
    if [[ -n $split ]]; then
      export PEAKFS_PIN=split
      ((s * w < cores)) && export PEAKFS_CLIENT_CPUS=$((s * w))-$((cores - 1))
    fi
    bash "$ROOT/bench/peakfs-ab.sh" "$@"
  )
done
echo "== medians: echo-sync ops/s, the rest as fractions of echo-sync (range)"
table "$O"
