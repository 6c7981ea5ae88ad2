#!/usr/bin/env bash
# Call D7: IOR on 16 cores (mmap backend, 1 GiB per process), xh against xi (a sequential reader
# has its next read-ahead window in flight), alternating, twice.
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
for i in 1 2; do for b in xh xi; do
  gpu-run/$b/peakfs bench --local-backend mmap --local-pin --procs 8 --local-cluster 4 --local-workers 2 --local-data-mib 8192 --ior-mib 1024 --echo-ops 20000 --only ior --json > $O/ior-$b-$i.jsonl 2> $O/ior-$b-$i.err || { echo FAILED; tail -3 $O/ior-$b-$i.err; }
  sum $O/ior-$b-$i.jsonl "$b $i"
done; done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
