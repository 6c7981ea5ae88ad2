#!/usr/bin/env python3
# Per build, the median (least-greatest, runs) of each phase: fraction of echo-sync for the
# echo-routed and mdtest phases, GB/s for IOR. Usage: summary.py DIR... (each DIR holds the
# NAME.jsonl files of one call; a run whose name holds "base" is build base, any other the
# new build).
import json, os, statistics, sys

cells = {}
for d in sys.argv[1:]:
    for f in sorted(os.listdir(d)):
        if not f.endswith(".jsonl"):
            continue
        build = "base" if "base" in f else "new"
        for line in open(os.path.join(d, f)):
            if not line.startswith("{"):
                continue
            r = json.loads(line)
            w = r["workload"]
            if w.startswith("ior"):
                v = r["gbps"]
            elif w.startswith(("mdtest", "echo-routed")):
                v = r["extra"]["fraction_of_echo_sync"]
            else:
                continue
            cells.setdefault(w, {}).setdefault(build, []).append(v)
for w, b in cells.items():
    row = "  ".join(
        f"{k} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f}, {len(v)})"
        for k, v in sorted(b.items())
    )
    print(f"{w:30} {row}")
