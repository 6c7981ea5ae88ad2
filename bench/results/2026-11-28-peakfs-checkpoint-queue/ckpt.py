#!/usr/bin/env python3
# One bench run of call-a.sh: each mdtest phase's fraction of echo-sync and latency tail, and
# the workers' stop lines summed: checkpoint stops (ms, longest piece), settle and pump
# stalls (rounds of log work over 50 us), and preemptions (involuntary context switches).
# Usage: ckpt.py RUN.jsonl RUN-logs  (or: ckpt.py --summary DIR, over an unpacked runs.tgz,
# runs named KIND<round>-BUILD.jsonl)
import glob, json, os, re, statistics as st, sys, collections

def phases(path):
    out = {}
    for l in open(path):
        if l.startswith("{"):
            r = json.loads(l)
            if r["workload"].startswith("mdtest") or r["workload"] == "echo-sync":
                out[r["workload"]] = (r["extra"].get("fraction_of_echo_sync", 1.0), r["iops"], r.get("latency_us") or {})
    return out

def workers(logs):
    s = collections.Counter(); piece = 0.0
    for log in glob.glob(f"{logs}/s*.log"):
        for line in open(log):
            if "worker stopped" not in line:
                continue
            m = re.search(r'checkpoint_ms="?([0-9.]+)', line); s["ckpt_ms"] += float(m.group(1)) if m else 0
            m = re.search(r'checkpoint_piece_max_us=([0-9]+)', line); piece = max(piece, float(m.group(1)) if m else 0)
            m = re.search(r'checkpoints=([0-9]+)', line); s["ckpts"] += int(m.group(1)) if m else 0
            m = re.search(r' involuntary_switches=([0-9]+)', line); s["preempted"] += int(m.group(1)) if m else 0
            for k in ("settle", "pump"):
                m = re.search(k + r'_max_us_ms_stalls_ms="?[0-9.]+/[0-9.]+/([0-9]+)/([0-9.]+)', line)
                if m:
                    s[k + "_stalls"] += int(m.group(1)); s[k + "_ms"] += float(m.group(2))
    return s, piece

def main():
    if sys.argv[1] == "--summary":
        d = sys.argv[2]; rows = collections.defaultdict(lambda: collections.defaultdict(list))
        for f in sorted(glob.glob(f"{d}/*.jsonl")):
            name, build = os.path.basename(f)[:-6].split("-", 1)
            build = name.rstrip("0123456789") + " " + build
            for w, (fr, iops, lat) in phases(f).items():
                rows[build][w + " fraction"].append(fr)
                if lat: rows[build][w + " p99.9 us"].append(lat.get("p999", 0))
            s, piece = workers(f[:-6] + "-logs")
            for k, v in s.items(): rows[build][k].append(v)
            rows[build]["longest piece us"].append(piece)
        for build in sorted(rows):
            for k in sorted(rows[build]):
                v = rows[build][k]
                print(f"{build:12s} {k:40s} median {st.median(v):10.3f}  [{min(v):.3f} .. {max(v):.3f}]  n={len(v)}")
        sys.exit(0)

    for w, (fr, iops, lat) in phases(sys.argv[1]).items():
        print(f"{w:30s} {fr:.3f} {iops/1e3:6.0f}K p99 {lat.get('p99',0):6.1f} p999 {lat.get('p999',0):7.1f} max {lat.get('max',0):7.0f}")
    s, piece = workers(sys.argv[2])
    print("workers:", dict(s), "longest piece us", piece)

if __name__ == "__main__":
    main()
