#!/usr/bin/env bash
# Call K2: phase length (10,000 vs 40,000 files per process) and per-process client pinning, 4x2.
set -u
O=${1:?}; nproc; date -u
for i in $(seq ${RUNS:-4}); do for v in f10 f40 f10p f40p; do
  case $v in f10*) F=10000;; *) F=40000;; esac
  case $v in *p) export PEAKFS_X_PIN_EACH=1;; *) unset PEAKFS_X_PIN_EACH;; esac
  python3 -c "
import resource, subprocess, sys
with open('$O/$v-a$i.jsonl', 'w') as o, open('$O/$v-a$i.err', 'w') as e:
    r = subprocess.run('gpu-run/x/peakfs bench --local-pin --procs 8 --files $F --local-cluster 4 --local-workers 2 --local-data-mib 4096 --only create-empty --only stat-empty --only remove-empty --json'.split(), stdout=o, stderr=e)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print('FAILED' if r.returncode else '', f'user {u.ru_utime:.1f} s sys {u.ru_stime:.1f} s')
" > $O/t.txt
  echo -n "$v-a$i: "; python3 gpu-run/x/line.py $O/$v-a$i.jsonl; echo "   $(cat $O/t.txt)"
done; done
python3 - $O <<'PY'
import glob, json, statistics, sys
for b in ["f10", "f40", "f10p", "f40p"]:
    runs = {}
    for f in sorted(glob.glob(f"{sys.argv[1]}/{b}-a[0-9]*.jsonl")):
        for l in open(f):
            if l.startswith("{"):
                r = json.loads(l); w = r["workload"]
                runs.setdefault(w, []).append(r["iops"] if w == "echo-sync" else r["extra"].get("fraction_of_echo_sync", 0))
    for w, v in runs.items():
        if w != "echo-pipelined":
            print(f"{b} MEDIAN {w:32} {statistics.median(v):10.3f}  ({min(v):.3f}-{max(v):.3f}, {len(v)} runs)")
PY
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err t.txt && ls
