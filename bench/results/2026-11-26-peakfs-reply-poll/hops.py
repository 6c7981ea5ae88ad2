#!/usr/bin/env python3
# Summary of call B's hop-lines.txt: per variant, the medians over the workers' lines of
# forwarded / requests and of the hop timers' mean, p50 and p99 (microseconds).
import re, statistics as st, sys, collections
rows = collections.defaultdict(list); v = None
for line in open(sys.argv[1]):
    m = re.match(r"== (\S+):", line)
    if m: v = m.group(1); continue
    kv = dict(re.findall(r'(\w+)="?([^" ]+)"?', line))
    if "requests" not in kv or kv.get("hop_us", "-") == "-": continue
    t = {k: [float(x) for x in kv[k].split("/")] for k in ("hop_queued_us", "hop_served_us", "hop_us")}
    rows[v].append((int(kv["forwarded"]) / max(1, int(kv["requests"])), t))
for v, rs in rows.items():
    print(f"{v}: {len(rs)} worker lines, forwarded/requests median {st.median(r[0] for r in rs):.2f}")
    for k in ("hop_queued_us", "hop_served_us", "hop_us"):
        print(f"  {k:14s} mean {st.median(r[1][k][0] for r in rs):6.2f}  p50 {st.median(r[1][k][1] for r in rs):6.2f}  p99 {st.median(r[1][k][2] for r in rs):7.2f}")
