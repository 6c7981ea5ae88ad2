import json, sys
out = []
for l in open(sys.argv[1]):
    if not l.startswith("{"): continue
    r = json.loads(l); e = r["extra"]; w = r["workload"].replace("mdtest-", "").replace("-empty", "")
    if w == "echo-sync": out.append(f"sync {r['iops']/1e3:.0f}K")
    elif w == "echo-pipelined": continue
    else:
        s = f"{w} {e['fraction_of_echo_sync']:.2f} [{e['slowest_proc_s']/e['fastest_proc_s']:.2f}]"
        if "max_procs_per_slice" in e: s += f" crowd={e['max_procs_per_slice']:.0f}"
        out.append(s)
print(" | ".join(out))
