#!/usr/bin/env bash
# Call Q: where the private phases lose against echo-sync: echo-home (same servers and
# threads as the private phases), the busiest slice, and each phase's slowest/fastest process.
set -u
O=${1:?}; B=${B:-gpu-run/q}
nproc; date -u
for i in $(seq ${RUNS:-10}); do
  $B/peakfs bench --local-cluster 4 --local-workers 2 --local-pin --local-data-mib 2048 --procs 8 \
    --files ${FILES:-10000} --only create-empty --only stat-empty --json > $O/q$i.jsonl 2> $O/q$i.err || { echo FAILED; tail -3 $O/q$i.err; }
  python3 - $O/q$i.jsonl <<'PY'
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
PY
done
date -u
