set -u
O=$1
for i in 1 2 3; do
 for t in "all8x1 8 1 4096" "all4x2 4 2 4096"; do set -- $t
  RUST_LOG=info timeout 150 gpu-run/diag2/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster $2 --local-workers $3 --local-data-mib $4 --only create-empty --only stat-empty --only remove-empty --local-logs $O/logs-$1-$i --json > $O/$1-$i.jsonl 2>$O/$1-$i.err
  python3 bench/results/2026-11-26-peakfs-data-path/summary.py $O/$1-$i.jsonl "$1 $i"
  grep -h "worker stopped" $O/logs-$1-$i/s*.log | sed -E 's/.*(worker=[0-9]+).*(checkpoints=.*)/  \1 \2/'
 done
done
