#!/usr/bin/env python3
# Per-operation latencies of one bench run: lat.py RUN.jsonl LABEL
# (echo-sync in K ops/s and its mean round trip per process; each timed phase: fraction of
# echo-sync, then mean / p50 / p90 / p99 / p99.9 / max in microseconds).
import json, sys
out = []
for l in open(sys.argv[1]):
    if not l.startswith("{"):
        continue
    r = json.loads(l); w = r["workload"].replace("mdtest-", "").replace("-empty", ""); e = r["extra"]
    procs = r["parameters"]["procs"]
    if w == "echo-sync":
        out.append(f'echo-sync {r["iops"]/1e3:.0f}K ({procs / r["iops"] * 1e6:.1f} us)')
    lat = r.get("latency_us")
    if lat:
        out.append(f'{w} {e["fraction_of_echo_sync"]:.3f} [{lat["mean"]:.1f} {lat["p50"]:.1f} {lat["p90"]:.1f} {lat["p99"]:.1f} {lat["p999"]:.0f} {lat["max"]:.0f}]')
print(sys.argv[2], " | ".join(out))
