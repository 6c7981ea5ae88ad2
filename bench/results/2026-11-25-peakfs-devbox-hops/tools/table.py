import json,sys,statistics as st,collections
rows=collections.defaultdict(lambda: collections.defaultdict(list))
for l in open(sys.argv[1]):
    r=json.loads(l); b=r["ab_bin"].rstrip("/").split("/")[-1]
    rows[b][r["workload"]].append((r["iops"], r["extra"].get("fraction_of_echo_sync",0)))
ws=["echo-sync"]+[w for w in next(iter(rows.values())) if w.startswith("mdtest")]
print("| build | " + " | ".join(w.replace("mdtest-","").replace("-empty","") for w in ws) + " |")
print("| --- |" + " ---: |"*len(ws))
for b,d in rows.items():
    cells=[]
    for w in ws:
        v=d[w]
        if w=="echo-sync":
            cells.append(f'{st.median(x[0] for x in v)/1000:.1f} K')
        else:
            fr=sorted(x[1] for x in v)
            cells.append(f'{st.median(x[0] for x in v)/1000:.1f} K, {st.median(fr):.2f} ({fr[0]:.2f}-{fr[-1]:.2f})')
    print(f"| {b} (n={len(d['echo-sync'])}) | " + " | ".join(cells) + " |")
# count of runs >= 0.6
print()
for b,d in rows.items():
    c=[]
    for w in ws[1:]:
        if "create" in w or "stat" in w:
            v=[x[1] for x in d[w]]
            c.append(f'{w.replace("mdtest-","").replace("-empty","")} {sum(1 for x in v if x>=0.6)}/{len(v)}')
    print(b, "runs >= 0.60:", ", ".join(c))
