#!/usr/bin/env bash
# SwarmIO's measurements on the GPU machine, from a bundle holding the `swarmio` binary.
# Usage: bench/swarmio-gpu.sh BUNDLE_DIR RESULTS_DIR
set -uo pipefail
bundle="$1"; results="$2"
sw="$bundle/bin/swarmio"
out="$results/swarmio-gpu.jsonl"
mkdir -p "$results"; : > "$out"
failed=0
run() {
  local line
  if line=$(timeout 120 "$sw" bench --json "$@" 2>/tmp/sw.err); then
    echo "$line" >> "$out"
    python3 - "$line" "$*" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); lat = r.get("latency_us") or {}
f = r.get("extra", {}).get("fraction_of_target", 0)
print(f'{r["iops"]/1e6:8.2f} MIOPS ({100*f:5.1f}% of target) {r["gbps"]:6.2f} GB/s mean {lat.get("mean", 0):8.2f} us p50 {lat.get("p50", 0):8.1f} us | {sys.argv[2]} | {r.get("notes", "")}')
PY
  else
    failed=1; echo "FAILED: $*"; tail -3 /tmp/sw.err
  fi
}
G="--initiator gpu --block-size 512 --threads 65536 --queues 256 --queue-depth 256 --duration 3"
# 512 B random reads into GPU memory against targets; the last ones find the ceiling.
for t in 5 10 20 30 40 60 80 200; do run $G --target-miops $t --units 2 --workers 6; done
run $G --target-miops 200 --units 4 --workers 3
run $G --target-miops 40 --units 2 --workers 6 --fill --verify
# Against the NVMeVirt-like baseline at the same target, in the same run.
run $G --target-miops 40 --units 2 --workers 6 --baseline --gpu-data direct
run $G --target-miops 40 --units 2 --workers 6 --baseline --gpu-data bounce
# Ablation: no coalesced fetching; per-request timing updates.
run $G --target-miops 40 --units 2 --workers 6 --no-coalesce
run $G --target-miops 40 --units 2 --workers 6 --per-request
# Latency at low load: one host thread, one command in flight (model: 50 us).
run --initiator cpu --threads 1 --inflight 1 --queues 1 --block-size 512 --target-miops 40 --latency-us 50 --units 1 --workers 1 --duration 3
# 8 KiB blocks: data rate against the pinned host-to-device copy bandwidth.
run --initiator gpu --block-size 8192 --threads 16384 --queues 64 --duration 3 --target-miops 20 --units 2 --workers 6 --fill --verify
run --initiator gpu --block-size 8192 --threads 16384 --queues 64 --duration 3 --target-miops 20 --units 2 --workers 6
# The paper's sweeps in one command (JSON lines + SVG plot under RESULTS_DIR/validate).
timeout 400 "$sw" validate --initiator gpu --block-size 512 --threads 65536 --queues 256 --queue-depth 64 \
  --duration 2 --units 2 --workers 6 --out "$results/validate" --targets 5,10,20,30,40 \
  --queue-counts 16,64,256,1024,2048 2>&1 | grep -vE "^ {2}" | tail -45 || failed=1
exit "$failed"
