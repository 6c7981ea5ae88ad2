#!/usr/bin/env python3
# One line per bench run of the call-*.sh scripts: summary.py RUN.jsonl LABEL
# (echo-sync in K ops/s, metadata as fractions of it, IOR and transfer ceilings in GB/s
# with the fraction of the ceiling and the fastest and slowest process).
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
