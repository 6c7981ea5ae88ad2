set -u
date -u; nvidia-smi --query-gpu=name --format=csv,noheader; nproc
B=gpu-bundle/bin
for i in 1 2 3; do
echo "== run $i old (Fs::read looks the inode up in the shared map)"; $B/probe_old 2 2 2
echo "== run $i new (thread's cached entry)"; $B/probe_new 2 2 2
done
