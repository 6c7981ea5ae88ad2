set -u
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
echo "== gofs A/B: heap buffer (b33d6e1) vs page-aligned read buffer"
bash bench/gofs-ab.sh gpu-call/gofs-b33d6e1 gpu-call/gofs-aligned 3
