set -u
export OUT=${OUT:-/tmp}
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
echo "== GPU tests"
GPU_TESTS=1 gpu-bundle/tests/gpu 2>&1 | grep -E "^test |test result"
GPU_TESTS=1 gpu-bundle/tests/gpu_common 2>&1 | grep -E "^test |test result"
echo "== gofs bench, final code, three runs"
RUNS="1 2 3" BIN=gpu-bundle/bin PARTS="gofs" bash bench/cpu-16core.sh 2>&1 | grep -E "run|randread|seqread|multifile-read"
echo "== peakfs full bench, final code (mmap backend)"
BIN=gpu-bundle/bin PARTS="peakfs" bash bench/cpu-16core.sh 2>&1 | grep -E "==|^(echo|mdtest|ior)|rror"
