set -u
export OUT=${OUT:-/tmp}
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
echo "== gofs bench, final code, two runs"
RUNS="1 2" BIN=gpu-bundle/bin PARTS="gofs" bash bench/cpu-16core.sh 2>&1 | grep -E "run|randread|seqread-4k|multifile-read-batch"
