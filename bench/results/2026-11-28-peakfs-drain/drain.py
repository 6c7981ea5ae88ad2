#!/usr/bin/env python3
# One bench run of call-a.sh: ckpt.py's per-phase fractions and stop sums, plus the workers'
# longest checkpoint take and last stop (us). Usage: drain.py RUN.jsonl RUN-logs, or
# drain.py --summary DIR (an unpacked runs.tgz, runs named KIND<round>-BUILD.jsonl).
import collections, glob, importlib.util, os, re, statistics as st, sys

spec = importlib.util.spec_from_file_location(
    "ckpt", os.path.join(os.path.dirname(__file__), "../2026-11-28-peakfs-checkpoint-queue/ckpt.py"))
ckpt = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ckpt)

def stops(logs):
    worst = collections.Counter()
    for log in glob.glob(f"{logs}/s*.log"):
        for line in open(log):
            if "worker stopped" in line:
                for k in ("take", "last"):
                    m = re.search(rf"checkpoint_{k}_max_us=([0-9]+)", line)
                    worst[k] = max(worst[k], int(m.group(1)) if m else 0)
    return worst

if sys.argv[1] == "--summary":
    rows = collections.defaultdict(lambda: collections.defaultdict(list))
    for f in sorted(glob.glob(f"{sys.argv[2]}/*.jsonl")):
        name, build = os.path.basename(f)[:-6].split("-", 1)
        build = name.rstrip("0123456789") + " " + build
        for w, (fr, iops, lat) in ckpt.phases(f).items():
            rows[build][w + " fraction"].append(fr)
            if lat:
                rows[build][w + " p99.9 us"].append(lat.get("p999", 0))
                rows[build][w + " max us"].append(lat.get("max", 0))
        s, piece = ckpt.workers(f[:-6] + "-logs")
        for k, v in s.items(): rows[build][k].append(v)
        for k, v in stops(f[:-6] + "-logs").items(): rows[build][f"longest {k} us"].append(v)
    for build in sorted(rows):
        for k in sorted(rows[build]):
            v = rows[build][k]
            print(f"{build:11s} {k:44s} median {st.median(v):10.3f}  [{min(v):.3f} .. {max(v):.3f}]  n={len(v)}")
    sys.exit(0)

for w, (fr, iops, lat) in ckpt.phases(sys.argv[1]).items():
    print(f"{w:30s} {fr:.3f} {iops/1e3:6.0f}K p99 {lat.get('p99',0):6.1f} p999 {lat.get('p999',0):7.1f} max {lat.get('max',0):7.0f}")
s, piece = ckpt.workers(sys.argv[2])
print("workers:", dict(s), "longest take/last us", dict(stops(sys.argv[2])))
