set -u
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; nproc
echo "== PeakFS metadata, 4 servers x 4 workers, mmap, 8 client processes: old (404ca61) and new alternating"
S=$(date +%s)
OUT=$OUT PARTS=peakfs RUNS="1 2" PEAKFS_ONLY="create-empty stat-empty remove-empty" PEAKFS_BASE_BIN=gpu-run/old BIN=gpu-run/new bash bench/cpu-16core.sh
echo "peakfs took $(( $(date +%s) - S )) s"
