set -u
export OUT=${OUT:-/tmp}
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
echo "== gofs A/B: every timed read checked (b33d6e1) vs one in 64 (bench change)"
bash bench/gofs-ab.sh gpu-call/gofs-b33d6e1 gpu-bundle/bin/gofs 3
