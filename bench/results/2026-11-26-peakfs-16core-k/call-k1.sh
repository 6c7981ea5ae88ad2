#!/usr/bin/env bash
# Call K1: controller idle sleep 20 us (today) vs 300 us vs 2000 us, 4x2 pinned, alternating.
set -u
O=${1:?}; nproc; date -u
cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list /sys/devices/system/cpu/cpu8/topology/thread_siblings_list 2>&1 | head -2
uname -r
for i in $(seq ${RUNS:-6}); do for us in 20 300 2000; do
  export PEAKFS_X_CTRL_SLEEP_US=$us
  python3 -c "
import resource, subprocess, sys
with open('$O/s$us-a$i.jsonl', 'w') as o, open('$O/s$us-a$i.err', 'w') as e:
    r = subprocess.run('gpu-run/x/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 2048 --only create-empty --only stat-empty --only remove-empty --json'.split(), stdout=o, stderr=e)
u = resource.getrusage(resource.RUSAGE_CHILDREN)
print('FAILED' if r.returncode else '', f'user {u.ru_utime:.1f} s sys {u.ru_stime:.1f} s nvcsw {u.ru_nvcsw} nivcsw {u.ru_nivcsw}')
" > $O/t.txt
  echo -n "s$us-a$i: "; python3 gpu-run/x/line.py $O/s$us-a$i.jsonl; echo "   cpu(children user sys): $(cat $O/t.txt)"
done; done
python3 - $O <<'PY'
import glob, json, statistics, sys
for b in ["s20", "s300", "s2000"]:
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
