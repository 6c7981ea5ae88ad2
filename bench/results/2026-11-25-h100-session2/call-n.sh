set -u
export OUT=${OUT:-/tmp}
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
echo "== GPU tests (final code)"
GPU_TESTS=1 gpu-bundle/tests/gpu 2>&1 | grep -E "^test |test result"
GPU_TESTS=1 gpu-bundle/tests/gpu_common 2>&1 | grep -E "^test |test result"
echo "== swarmio, final code"
source bench/swarmio-pinning.sh --functions-only
run --target-miops 40 --units 4 --workers 3
run --target-miops 20 --units 4 --workers 3
echo "== gofs bench, final code, twice"
RUNS="1 2" BIN=gpu-bundle/bin PARTS="gofs" bash bench/cpu-16core.sh 2>&1 | grep -E "run|randread|seqread|multifile-read"
