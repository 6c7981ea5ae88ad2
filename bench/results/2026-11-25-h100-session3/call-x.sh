set -u
export OUT=${OUT:-/tmp}
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
echo "== gofs bench, final code, three runs"
RUNS="1 2 3" BIN=gpu-bundle/bin PARTS="gofs" bash bench/cpu-16core.sh 2>&1 | grep -E "run|randread|seqread|multifile-read-batch"
