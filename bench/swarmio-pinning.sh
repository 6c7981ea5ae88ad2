#!/usr/bin/env bash
# Issue 4 follow-up: pinning, copy-wait accounting, baseline with per-request copies.
set -uo pipefail
sw=${BUNDLE:-gpu-bundle}/bin/swarmio
out=${OUT:-/tmp}/swarmio-$(basename "$0" .sh).jsonl; : > "$out"
G="--initiator gpu --block-size 512 --threads 65536 --queues 256 --queue-depth 256 --duration 3"
run() {
  local line
  if line=$(timeout 90 $sw bench --json $G "$@" 2>/tmp/sw.err); then
    echo "$line" >> "$out"
    python3 - "$line" "$*" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); lat = r.get("latency_us") or {}
f = r.get("extra", {}).get("fraction_of_target", 0)
print(f'{r["iops"]/1e6:8.2f} MIOPS ({100*f:5.1f}%) mean {lat.get("mean", 0):8.1f} us | {sys.argv[2]} | {r.get("notes", "")}')
PY
  else echo "FAILED: $*"; tail -3 /tmp/sw.err; fi
}
[ "${1:-}" = --functions-only ] && return 0
nproc; nvidia-smi --query-gpu=name --format=csv,noheader
for i in 1 2; do
run --target-miops 40 --units 2 --workers 6
run --target-miops 40 --units 2 --workers 6 --pin-threads
done
run --target-miops 30 --units 2 --workers 6
run --target-miops 30 --units 2 --workers 6 --pin-threads
run --target-miops 200 --units 2 --workers 6
run --target-miops 200 --units 2 --workers 6 --pin-threads
run --target-miops 200 --units 4 --workers 3 --pin-threads
run --target-miops 40 --units 2 --workers 6 --baseline
run --target-miops 40 --units 2 --workers 6 --no-batched-copies
