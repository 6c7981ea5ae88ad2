#!/usr/bin/env python3
# perop.py SAMPLES BENCHLOG: CPU us/op and context switches/op per thread group per phase
import sys, re, datetime, collections
samples = collections.defaultdict(list)  # tid -> [(t, rt, v, iv, group)]
for l in open(sys.argv[1]):
    t, p, tid, comm, exe, rt, v, iv = l.split()
    if exe == "peakfs": g = "client"
    elif exe == "peakfs-master": g = "master"
    elif comm.startswith("peakfs-worker"): g = "worker"
    elif comm.startswith("nvme") or comm.startswith("iou"): g = "nvme"
    else: g = "srv-other:" + comm
    samples[tid].append((float(t), int(rt), int(v), int(iv), g))
ansi = re.compile(r"\x1b\[[0-9;]*m")
def val(tid, t):
    s = samples[tid]
    # last sample at or before t
    best = None
    for x in s:
        if x[0] <= t: best = x
        else: break
    return best
for l in open(sys.argv[2]):
    l = ansi.sub("", l)
    m = re.search(r"^(\S+).*phase=(\S+) ops=(\d+) wall=(\S+)", l)
    if not m: continue
    end = datetime.datetime.fromisoformat(m.group(1).replace("Z","+00:00")).timestamp()
    w = m.group(4)
    wall = float(w[:-2])/1e3 if w.endswith("ms") else float(w[:-2])/1e6 if w.endswith("µs") else float(w[:-1])
    start = end - wall
    ops = int(m.group(3))
    agg = collections.defaultdict(lambda: [0,0,0])
    for tid in samples:
        a, b = val(tid, start + 0.02), val(tid, end - 0.02)
        if not a or not b: continue
        g = a[4]
        agg[g][0] += b[1]-a[1]; agg[g][1] += b[2]-a[2]; agg[g][2] += b[3]-a[3]
    span = wall - 0.04
    rate = ops / wall
    cells = "  ".join(f"{g}={v[0]/1e3/(rate*span):.2f}us vcs={v[1]/(rate*span):.2f} ivcs={v[2]/(rate*span):.2f}" for g, v in sorted(agg.items()) if v[0] > 0)
    print(f"{m.group(2):30} {rate:8.0f}/s  {cells}")
