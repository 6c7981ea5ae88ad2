#!/usr/bin/env bash
# gpu-nvme's measurement sweep on the GPU machine, from a `cargo xtask gpu-bundle` bundle.
# Usage: bench/gpu-nvme-sweep.sh BUNDLE_DIR RESULTS_DIR
# Writes RESULTS_DIR/gpu-nvme-sweep.jsonl (one common bench record per run) and prints a line
# per run. Every data run checks every byte it reads (--verify), except the ones marked
# "no-verify" that measure the cost of checking.
set -uo pipefail
bundle="$1"; results="$2"
bench="$bundle/bin/nvme-bench"
ns=/dev/shm/gpu-nvme-sweep.img
out="$results/gpu-nvme-sweep.jsonl"
mkdir -p "$results"; : > "$out"
nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
echo "cores: $(nproc)"
"$bench" --create-mib 8192 --controller "file:$ns" --initiator cpu --null --duration 0.1 --threads 1 --json >/dev/null
failed=0
run() {
  local line
  if line=$(timeout 90 "$bench" --controller "file:$ns" --duration 4 --json "$@" 2>/tmp/sweep.err); then
    echo "$line" >> "$out"
    python3 - "$line" "$*" <<'PY'
import json, sys
r = json.loads(sys.argv[1]); lat = r.get("latency_us") or {}
print(f'{r["iops"]/1e6:8.2f} MIOPS {r["gbps"]:6.2f} GB/s p50 {lat.get("p50", 0):8.1f} us  | {sys.argv[2]}  | {r.get("notes", "")}')
PY
  else
    failed=1; echo "FAILED: $*"; tail -3 /tmp/sweep.err
  fi
}
G="--initiator gpu"
# Control path: GPU threads through the ticket protocol, host threads polling.
run $G --null --threads 65536 --queues 256 --queue-depth 256 --workers 14
run $G --null --threads 8192 --queues 64 --queue-depth 256 --workers 8
# 4 KiB random reads into GPU memory: GPU pull from bounce slots vs the copy engines.
run $G --block-size 4096 --threads 16384 --queues 64 --workers 14 --gpu-data bounce --verify
run $G --block-size 4096 --threads 16384 --queues 64 --workers 14 --gpu-data bounce
run $G --block-size 4096 --threads 8192 --queues 64 --workers 14 --gpu-data direct --verify
# Other sizes, both data paths.
run $G --block-size 512 --threads 32768 --queues 128 --workers 14 --gpu-data bounce --verify
for size in 16384 65536 262144; do
  threads=$(( size >= 262144 ? 1024 : 4096 ))
  run $G --block-size $size --threads $threads --queues 32 --queue-depth 128 --workers 14 --gpu-data bounce --verify
  run $G --block-size $size --threads $threads --queues 32 --queue-depth 128 --workers 14 --gpu-data direct --verify
done
# Writes from GPU memory (bounce push), checked by reading back in the same run's pattern.
run $G --op write --block-size 4096 --threads 16384 --queues 64 --workers 14 --verify
# Fresh data when a bounce slot is reused: each GPU load kind, checked byte for byte.
for kind in 1 2 3; do run $G --block-size 4096 --threads 16384 --queues 64 --workers 14 --gpu-data bounce --load-kind $kind --verify; done
# Host threads as initiators (the CPU engine).
run --initiator cpu --null --threads 8 --queues 8 --workers 4
run --initiator cpu --block-size 4096 --threads 8 --queues 8 --workers 6 --verify
exit "$failed"
