#!/usr/bin/env bash
# Call D3: IOR on 16 cores (mmap backend, 1 GiB per process), build xd, the file controller with one
# thread per server (the default) against two (--controller-workers 2: one per worker),
# alternating, twice.
set -u
O=${1:?}; nproc; date -u; df -h /dev/shm | tail -1
sum() {
  python3 - "$1" "$2" <<'PY'
import json, sys
out = []
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l); w = r["workload"].replace("mdtest-", ""); e = r["extra"]
        if w.startswith(("ior", "xfer")):
            f = e.get("fraction_of_xfer_write", e.get("fraction_of_xfer_read"))
            out.append(f'{w} {r["bytes"]/r["duration_s"]/1e9:.2f}' + (f' ({f:.2f}; {e["fastest_proc_s"]:.2f}-{e["slowest_proc_s"]:.2f} s)' if f else ''))
        elif w == "echo-sync":
            out.append(f'echo-sync {r["iops"]/1e3:.0f}K')
        elif w != "echo-pipelined":
            out.append(f'{w} {e["fraction_of_echo_sync"]:.3f}')
print(sys.argv[2], " | ".join(out))
PY
}
for i in 1 2; do for cw in 1 2; do
  gpu-run/xd/peakfs bench --local-backend mmap --local-server-arg=--controller-workers=$cw --local-pin --procs 8 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --echo-ops 20000 --only ior --json > $O/ior-cw$cw-$i.jsonl 2> $O/ior-cw$cw-$i.err || { echo FAILED; tail -3 $O/ior-cw$cw-$i.err; }
  sum $O/ior-cw$cw-$i.jsonl "cw$cw $i"
done; done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
