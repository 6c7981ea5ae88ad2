#!/usr/bin/env python3
# A/B summary of alternating bench runs: ab.py GLOB BUILD_A BUILD_B, over files named
# PHASESET-BUILD-ROUND.jsonl: per phase, the median fraction of echo-sync (quartiles) of each
# build, the round pairs in which B was higher, and the median ops/s of each.
import json,glob,statistics as st,collections,sys
pat,A,B=sys.argv[1],sys.argv[2],sys.argv[3]
d=collections.defaultdict(lambda: collections.defaultdict(dict)); ops=collections.defaultdict(lambda: collections.defaultdict(dict))
for f in glob.glob(pat):
    parts=f[:-6].split("-"); b=parts[-2]; i=int(parts[-1])
    for l in open(f):
        if not l.startswith("{"): continue
        r=json.loads(l); w=r["workload"]
        if "fraction_of_echo_sync" in r["extra"]:
            d[w][b][i]=r["extra"]["fraction_of_echo_sync"]; ops[w][b][i]=r["iops"]
for w in sorted(d):
    a=d[w][A]; c=d[w][B]; common=sorted(set(a)&set(c))
    q=lambda v: st.quantiles(list(v),n=4)
    print(f"{w:30s} {A} {st.median(a.values()):.3f} [{q(a.values())[0]:.3f}-{q(a.values())[2]:.3f}] {B} {st.median(c.values()):.3f} [{q(c.values())[0]:.3f}-{q(c.values())[2]:.3f}] {B} higher {sum(c[i]>a[i] for i in common)}/{len(common)}  Kops/s {st.median(ops[w][A].values())/1e3:.0f} / {st.median(ops[w][B].values())/1e3:.0f}")
