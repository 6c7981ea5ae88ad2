#!/usr/bin/env python3
# One `peakfs bench --json` run as a table: ops/s, GB/s and, for echo and mdtest phases, the
# fraction of the run's echo-sync ceiling. Usage: table.py RUN.jsonl
import json, sys

for line in open(sys.argv[1]):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    fraction = r.get("extra", {}).get("fraction_of_echo_sync")
    shown = "" if fraction is None or r["workload"].startswith("ior") else f"  {fraction:.3f}"
    print(f"{r['workload']:30} {r['iops']:10.0f} ops/s {r['gbps']:6.2f} GB/s{shown}")
