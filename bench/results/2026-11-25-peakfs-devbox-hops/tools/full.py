import json,glob,sys,os
d=sys.argv[1]
runs={}
for f in sorted(glob.glob(d+'/*.jsonl')):
    k=os.path.basename(f)[:-6]
    runs[k]={json.loads(l)["workload"]:json.loads(l) for l in open(f) if l.startswith("{")}
ws=list(next(iter(runs.values())).keys())
print("| workload | " + " | ".join(runs) + " |")
print("| --- |" + " ---: |"*len(runs))
for w in ws:
    cells=[]
    for k,r in runs.items():
        x=r[w]; fr=x["extra"].get("fraction_of_echo_sync",0)
        if w.startswith("ior"):
            cells.append(f'{x["gbps"]:.2f} GB/s')
        elif w.startswith("echo"):
            cells.append(f'{x["iops"]/1000:.1f} K')
        else:
            cells.append(f'{x["iops"]/1000:.1f} K ({fr:.2f})')
    print(f"| {w} | " + " | ".join(cells) + " |")
