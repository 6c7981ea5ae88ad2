set -u
date -u; nvidia-smi --query-gpu=name --format=csv,noheader
echo "== gofs bench (10,000 x 16 KiB files), old (1 controller worker, batch on one queue) vs new (2 workers, one queue per thread for single reads, batch over both queues)"
for i in 1 2 3; do
  for g in gpu-call/old/gofs gpu-call/new/gofs; do
    timeout 200 $g bench --image /dev/shm/m.img --image-mib 1024 --json > /tmp/m.jsonl 2>/tmp/m.err || tail -3 /tmp/m.err
    rm -f /dev/shm/m.img
    cat /tmp/m.jsonl >> ${OUT:-/tmp}/gofs-m.jsonl
    python3 - $g /tmp/m.jsonl <<'PY'
import json,sys
rs=[json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
g=lambda w: next((r for r in rs if r["workload"]==w),{})
rr,sr,mp,mb=g("randread-4k"),g("seqread-4k"),g("multifile-read-perfile"),g("multifile-read-batch")
print(f'{sys.argv[1]:20} randread {rr.get("iops",0):8.0f} ({rr["extra"].get("ratio_to_raw",0):.3f} of raw) seqread {sr["extra"].get("ratio_to_raw",0):.3f} | multifile per-file {mp.get("iops",0):8.0f} batch {mb.get("iops",0):8.0f} = {mb["extra"].get("speedup_vs_perfile",0):.2f}x')
PY
  done
done
