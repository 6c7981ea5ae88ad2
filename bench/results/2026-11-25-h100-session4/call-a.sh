set -u
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; nproc; lscpu | grep "Model name"
echo "== readpath probe (2 controller workers, 2 s loops, 2 rounds), old/new alternating"
for r in 1 2; do for v in old new; do echo "-- $v"; timeout 60 gpu-run/$v/readpath_probe 2 2 2; done; done
echo "== gofs bench A/B"
S=$(date +%s)
OUT=$OUT bash bench/gofs-ab.sh gpu-run/old/gofs gpu-run/new/gofs 2
echo "bench took $(( $(date +%s) - S )) s"
