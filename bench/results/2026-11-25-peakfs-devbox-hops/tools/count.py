import json,sys,statistics as st
R='/work/main/bench/results/2026-11-25-peakfs-devbox-hops'
def load(files, binname):
    runs=[]
    for f in files:
        cur=None
        for l in open(f):
            r=json.loads(l)
            if not r["ab_bin"].rstrip('/').endswith('/'+binname): continue
            if r["workload"]=="echo-sync":
                cur={}; runs.append(cur)
            cur[r["workload"]]=(r["extra"].get("fraction_of_echo_sync"), r["iops"])
    return runs
sets={
 'final (254a0d1), 1 worker/server, confirmation': ([f'{R}/head-w1/peakfs-ab.jsonl'],'final'),
 'base, 1 worker/server, confirmation': ([f'{R}/head-w1/peakfs-ab.jsonl'],'base'),
 'final, 1 worker/server': ([f'{R}/final-w1-vs-w2/w1-a.jsonl', f'{R}/w1/peakfs-ab.jsonl', f'{R}/final-w1-vs-w2/w1u-b.jsonl'],'final'),
 'base, 1 worker/server': ([f'{R}/w1/peakfs-ab.jsonl'],'base'),
 'final, 2 workers/server': ([f'{R}/final-w1-vs-w2/w2-a.jsonl', f'{R}/w2/peakfs-ab.jsonl', f'{R}/final-w1-vs-w2/w2u-b.jsonl'],'final'),
 'base, 2 workers/server': ([f'{R}/w2/peakfs-ab.jsonl'],'base'),
 'final, 2 workers/server, split pinning': ([f'{R}/w2-split/peakfs-ab.jsonl', f'{R}/final-w1-vs-w2/w2s-b.jsonl'],'final'),
 'base, 2 workers/server, split pinning': ([f'{R}/w2-split/peakfs-ab.jsonl'],'base'),
 'final, 1 worker/server, split pinning': ([f'{R}/final-w1-vs-w2/w1s-b.jsonl'],'final'),
}
ws=['mdtest-create-empty-private','mdtest-stat-empty-private','mdtest-create-empty-bigdir','mdtest-stat-empty-bigdir']
print("| configuration | runs | create private | stat private | create bigdir | stat bigdir | all four >= 0.60 |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
for name,(files,b) in sets.items():
    runs=load(files,b)
    n=len(runs)
    cells=[]
    for w in ws:
        v=[r[w][0] for r in runs]
        c=sum(1 for x in v if x>=0.6)
        cells.append(f'{st.median(v):.2f} ({min(v):.2f}-{max(v):.2f}), {c}/{n} >= 0.60')
    allok=sum(1 for r in runs if all(r[w][0]>=0.6 for w in ws))
    print(f'| {name} | {n} | ' + ' | '.join(cells) + f' | {allok}/{n} |')
print()
print("| configuration | echo-sync | create private | stat private | create bigdir | stat bigdir |")
print("| --- | ---: | ---: | ---: | ---: | ---: |")
for name,(files,b) in sets.items():
    runs=load(files,b)
    print(f'| {name} | ' + ' | '.join(f'{st.median(r[w][1] for r in runs)/1000:.1f} K' for w in ['echo-sync']+ws) + ' |')
