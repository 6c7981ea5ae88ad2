#!/usr/bin/env bash
# Call D1: the IOR phases on 16 cores with their transfer ceilings (xfer-write / xfer-read),
# xa (one device wait per file block) against xb (one per request), alternating: twice with
# the servers on the mmap backend, once on their default (uring); then the raw file
# controller (nvme-bench) with 64 KiB and 256 KiB commands, io_uring and mmap.
set -u
O=${1:?}; nproc; date -u
for i in mmap1 mmap2 default; do for b in xa xb; do
  be=""; [ "${i#mmap}" != "$i" ] && be="--local-backend mmap"
  gpu-run/$b/peakfs bench $be --local-pin --procs 8 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --ior-mib 512 --echo-ops 20000 --only ior --json > $O/ior-$b-$i.jsonl 2> $O/ior-$b-$i.err || { echo FAILED; tail -3 $O/ior-$b-$i.err; }
  python3 - $O/ior-$b-$i.jsonl "$b $i" <<'PY'
import json, sys
out = []
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l); w = r["workload"]
        if w.startswith(("ior", "xfer")):
            f = r["extra"].get("fraction_of_xfer_write", r["extra"].get("fraction_of_xfer_read"))
            out.append(f'{w} {r["bytes"]/r["duration_s"]/1e9:.2f}' + (f' ({f:.2f})' if f else ''))
print(sys.argv[2], " | ".join(out))
PY
done; done
img=/dev/shm/raw.img
for be in uring mmap; do for bs in 65536 262144; do for op in write read; do
  echo -n "raw $be bs=$bs $op: "
  gpu-run/xa/nvme-bench --controller file:$img --create-mib 4096 --backend $be --threads 8 --queues 4 --workers 4 --inflight 1 --block-size $bs --op $op --duration 3 2>&1 | grep -E "^(GB/s)|WARN|warn" | tr '\n' ' '; echo
done; done; done
rm -f $img
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
