#!/usr/bin/env bash
# Issue 4's closing run on the GPU machine: every speed and fidelity figure of the issue on the
# final code, in one device call. 512 B random reads by 65,536 GPU threads into GPU memory over
# 256 queues, RAM namespace (sparse unless --fill), the paper's default timing (50 us).
# Usage: BUNDLE=gpu-bundle bash bench/swarmio-close.sh   (JSON lines into $OUT or /tmp)
set -uo pipefail
here=$(dirname "$0")
source "$here/swarmio-pinning.sh" --functions-only
out=${OUT:-/tmp}/swarmio-close.jsonl; : > "$out"
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
echo "== targets 5-40 MIOPS, 4 units x 3 workers and 3 x 4, twice"
for i in 1 2; do
  for t in 5 10 20 30 40; do run --target-miops $t --units 4 --workers 3; done
  for t in 30 40; do run --target-miops $t --units 3 --workers 4; done
done
echo "== filled namespace (every read copies data), 40 MIOPS"
run --target-miops 40 --units 4 --workers 3 --fill
echo "== most sustained"
run --target-miops 200 --units 4 --workers 3
run --target-miops 200 --units 3 --workers 4
run --target-miops 200 --units 5 --workers 2
echo "== SwarmIO against the NVMeVirt-like baseline (its front end and data path), same run"
run --target-miops 40 --units 4 --workers 3
run --target-miops 40 --units 4 --workers 3 --baseline --gpu-data direct
run --target-miops 40 --units 4 --workers 3 --baseline
echo "== ablation at 40 MIOPS: no coalescing, per-request timing updates"
run --target-miops 40 --units 4 --workers 3 --no-coalesce
run --target-miops 40 --units 4 --workers 3 --per-request
echo "== latency at low load (model 50 us)"
G="--initiator cpu --threads 1 --inflight 1 --queues 1 --queue-depth 64 --duration 3" \
  run --block-size 512 --target-miops 40 --latency-us 50 --units 1 --workers 1
echo "== 8 KiB blocks against pinned H2D"
G="--initiator gpu --block-size 8192 --threads 16384 --queues 64 --queue-depth 256 --duration 3" \
  run --target-miops 20 --units 4 --workers 3 --fill --verify
echo "== the paper's sweeps (swarmio validate)"
timeout 330 ${BUNDLE:-gpu-bundle}/bin/swarmio validate --initiator gpu --block-size 512 --threads 65536 \
  --queues 256 --queue-depth 64 --duration 2 --units 4 --workers 3 --out ${OUT:-/tmp}/validate \
  --targets 5,10,20,30,40 --queue-counts 16,64,256,1024,2048 2>&1 | grep -vE "^ {2}" | tail -40
