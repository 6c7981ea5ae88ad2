#!/usr/bin/env bash
# Call F2: the final build (fin: write-behind + data flushed before the log) against 2ba6786
# (b0), alternating: 4x2 pinned empty-file phases 6 rounds, the whole bench 4x2 pinned 2 rounds.
set -u
O=${1:?}; nproc; date -u
meta() { # build tag args...
  local b=$1 t=$2; shift 2
  gpu-run/$b/peakfs bench --local-pin --procs 8 --files 10000 "$@" --json > $O/$t.jsonl 2> $O/$t.err || { echo FAILED $t; tail -3 $O/$t.err; }
  echo -n "$t: "; python3 gpu-run/fin/line.py $O/$t.jsonl
}
for i in $(seq ${RUNS:-6}); do for b in b0 fin; do
  meta $b ${b}-a$i --local-cluster 4 --local-workers 2 --local-data-mib 2048 --only create-empty --only stat-empty --only remove-empty
done; done
for i in 1 2; do for b in b0 fin; do
  meta $b ${b}-c$i --local-cluster 4 --local-workers 2 --local-data-mib 4096 --ior-mib 256
done; done
python3 - $O <<'PY'
import glob, json, statistics, sys
for tag, what in [("a", "4x2 pinned, empty files"), ("c", "4x2 pinned, whole bench")]:
    print(f"== {what}")
    for b in ["b0", "fin"]:
        runs = {}; abs_ = {}
        for f in sorted(glob.glob(f"{sys.argv[1]}/{b}-{tag}[0-9]*.jsonl")):
            for l in open(f):
                if l.startswith("{"):
                    r = json.loads(l); w = r["workload"]
                    if w.startswith("ior"):
                        runs.setdefault(w, []).append(r["bytes"] / r["duration_s"] / 1e9); abs_.setdefault(w, []).append(0); continue
                    runs.setdefault(w, []).append(r["iops"] if w == "echo-sync" else r["extra"].get("fraction_of_echo_sync", 0))
                    abs_.setdefault(w, []).append(r["iops"] / 1e3)
        for w, v in runs.items():
            if w != "echo-pipelined":
                unit = "GB/s" if w.startswith("ior") else f"{statistics.median(abs_[w]):.0f}K ops/s"
                print(f"{b} {tag} MEDIAN {w:32} {statistics.median(v):10.3f}  ({min(v):.3f}-{max(v):.3f}, {len(v)} runs)  {unit}")
PY
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
