import json, os, re, sys, collections
D = sys.argv[1]
name = os.path.basename(D)
recs = {}
try:
    for l in open(os.path.join(D, "bench.json")):
        if l.startswith("{"):
            r = json.loads(l); recs[r["workload"]] = r
except FileNotFoundError:
    print(name, "no bench.json"); sys.exit()
cells = []
for w, r in recs.items():
    if w == "echo-sync":
        cells.append(f"echo {r['iops']/1e3:.0f}K")
    elif w.startswith("mdtest") or w == "echo-spread":
        cells.append(f"{w.replace('mdtest-','').replace('-empty','')} {r['extra']['fraction_of_echo_sync']:.3f}")
print(name, "  ".join(cells))
def load(f):
    cpu, th = {}, {}
    for l in open(f):
        p = l.split()
        if p[0].startswith("cpu"):
            v = list(map(int, p[1:]))
            cpu[p[0]] = (sum(v), v[3] + v[4])
        elif p[0] == "T" and len(p) >= 9:
            th[(p[1], p[2])] = (p[3], int(p[4]), int(p[6]), int(p[7]), int(p[8]))
    return cpu, th
try:
    (c0, t0), (c1, t1) = load(os.path.join(D, "before")), load(os.path.join(D, "after"))
except FileNotFoundError:
    sys.exit()
busy = []
for k in sorted(c1, key=lambda k: (len(k), k)):
    if k == "cpu" or k not in c0: continue
    tot = c1[k][0] - c0[k][0]; idle = c1[k][1] - c0[k][1]
    busy.append(1 - idle / tot if tot else 0)
print(f"  core busy 0-7: {' '.join(f'{b:.2f}' for b in busy[:8])} | 8-15: {' '.join(f'{b:.2f}' for b in busy[8:])}")
g = collections.defaultdict(lambda: [0, 0, 0, 0])
for k, (comm, ns, _sl, vol, nv) in t1.items():
    b = t0.get(k, (comm, 0, 0, 0, 0))
    grp = re.sub(r"\d+$", "", comm).rstrip("-")
    x = g[grp]; x[0] += ns - b[1]; x[1] += vol - b[3]; x[2] += nv - b[4]; x[3] += 1
print("  threads: " + "; ".join(f"{k} x{v[3]} {v[0]/1e9:.2f}s cpu {v[1]} vol {v[2]} invol" for k, v in sorted(g.items(), key=lambda kv: -kv[1][0])))
tot = collections.Counter()
for f in os.listdir(D):
    if f.endswith(".log"):
        for l in open(os.path.join(D, f)):
            if "worker stopped" in l:
                for m in re.finditer(r"(requests|forwarded|sleeps|woken|x_\w+)=(\d+)", l):
                    tot[m.group(1)] += int(m.group(2))
print("  workers:", dict(tot))
if tot.get("x_hops"):
    h = tot["x_hops"]
    loc = max(tot["requests"] - h, 1)
    print(f"  hop us: wait at owner {tot['x_wait_owner_ns']/h/1e3:.2f}, exec {tot['x_exec_ns']/h/1e3:.2f}, wait at origin {tot['x_wait_origin_ns']/h/1e3:.2f}, total {tot['x_total_ns']/h/1e3:.2f}; local exec {tot['x_local_exec_ns']/loc/1e3:.2f}; busy round {tot['x_busy_round_ns']/max(tot['x_busy_rounds'],1)/1e3:.2f} us x {tot['x_busy_rounds']}")
