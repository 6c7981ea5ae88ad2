#!/usr/bin/env python3
# Medians of each build's runs: fraction of echo-sync per phase. Usage: medians.py DIR...
# (each DIR holds NAME.jsonl files; the build is "prev" when the name has a p/prev in it).
import json, os, statistics, sys

runs = {}
for d in sys.argv[1:]:
    for f in sorted(os.listdir(d)):
        if not f.endswith(".jsonl"):
            continue
        name = f[:-6]
        build = "prev" if ("prev" in name or name.endswith("p")) else "hint"
        for line in open(os.path.join(d, f)):
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            frac = r.get("extra", {}).get("fraction_of_echo_sync")
            if frac is None or r["workload"].startswith(("ior", "xfer", "echo-sync", "echo-pipelined")):
                continue
            runs.setdefault(r["workload"], {}).setdefault(build, []).append(frac)
for w, b in runs.items():
    cells = "  ".join(
        f"{k} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f}, {len(v)})" for k, v in sorted(b.items(), reverse=True)
    )
    print(f"{w:30} {cells}")
