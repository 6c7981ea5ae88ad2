set -u
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
echo "== gofs A/B: sparse image (bb66b0d) vs every block of the image written"
bash bench/gofs-ab.sh gpu-call/gofs-sparse gpu-call/gofs-full 4
