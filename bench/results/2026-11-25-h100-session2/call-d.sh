set -u
export OUT=${OUT:-/tmp}
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
echo "== GPU tests"
GPU_TESTS=1 gpu-bundle/tests/gpu 2>&1 | tail -3
GPU_TESTS=1 gpu-bundle/tests/gpu_common 2>&1 | tail -3
echo "== gofs A/B: HEAD vs inline node paths"
bash bench/gofs-ab.sh gpu-call/gofs-head gpu-bundle/bin/gofs 3
echo "== swarmio 512 B at 40 MIOPS, 8 KiB filled and sparse"
source bench/swarmio-pinning.sh --functions-only
run --target-miops 40 --units 4 --workers 3
run --target-miops 40 --units 4 --workers 3
G8="--initiator gpu --block-size 8192 --threads 16384 --queues 64 --queue-depth 256 --duration 3"
G="$G8" run --target-miops 20 --units 4 --workers 3 --fill
G="$G8" run --target-miops 20 --units 4 --workers 3
echo "== peakfs 4 x 4, full bench"
BIN=gpu-bundle/bin PARTS="peakfs" bash bench/cpu-16core.sh
