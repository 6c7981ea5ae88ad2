set -u
date -u
for i in 1 2; do
BIN=gpu-bundle/bin PARTS="peakfs" bash bench/cpu-16core.sh 2>&1 | grep -E "==|^(echo|mdtest|ior)|rror"
PEAKFS_SERVERS=2 PEAKFS_SERVER_WORKERS=3 PEAKFS_PIN=split PEAKFS_CLIENT_CPUS=6-15 BIN=gpu-bundle/bin PARTS="peakfs" bash bench/cpu-16core.sh 2>&1 | grep -E "==|^(echo|mdtest|ior)|rror"
done
