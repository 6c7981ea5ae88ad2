set -u
export OUT=${OUT:-/tmp}
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; lscpu | grep -E "Model name|Thread|Socket|NUMA node\(s\)"
echo "== swarmio 8 KiB, filled namespace, no verify, twice"
source bench/swarmio-pinning.sh --functions-only
for i in 1 2; do
G="--initiator gpu --block-size 8192 --threads 16384 --queues 64 --queue-depth 256 --duration 3" \
  run --target-miops 20 --units 4 --workers 3 --fill
done
echo "== gofs A/B: round-robin queues (before) vs one queue per thread (after)"
bash bench/gofs-ab.sh gpu-call/gofs-before-tq gpu-bundle/bin/gofs 3
echo "== cART 10 M"
timeout 200 gpu-bundle/bin/peakfs-cart-bench --names 10000000 2>&1 | tail -6
echo "== peakfs spin sweep"
BIN=gpu-bundle/bin bash bench/peakfs-spin.sh
