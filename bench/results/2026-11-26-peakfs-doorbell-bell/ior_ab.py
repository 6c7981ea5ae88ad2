#!/usr/bin/env python3
# A/B summary of alternating IOR-phase runs: ior_ab.py GLOB BUILD_A BUILD_B, over files named
# ior-BUILD-ROUND.jsonl: per IOR and transfer phase, the median GB/s (range) of each build and
# the rounds in which B was faster.
import json, glob, statistics as st, collections, sys
pat, A, B = sys.argv[1:4]
d = collections.defaultdict(lambda: collections.defaultdict(dict))
for f in glob.glob(pat):
    parts = f[:-6].split("-"); b, i = parts[-2], int(parts[-1])
    for l in open(f):
        if l.startswith("{"):
            r = json.loads(l); w = r["workload"]
            if w.startswith(("ior", "xfer")):
                d[w][b][i] = r["bytes"] / r["duration_s"] / 1e9
for w in sorted(d):
    a, c = d[w][A], d[w][B]; common = sorted(set(a) & set(c))
    rng = lambda v: f"{min(v):.2f}-{max(v):.2f}"
    print(f"{w:14s} {A} {st.median(a.values()):.2f} ({rng(a.values())}) {B} {st.median(c.values()):.2f} ({rng(c.values())}) GB/s; {B} faster {sum(c[i] > a[i] for i in common)}/{len(common)}")
