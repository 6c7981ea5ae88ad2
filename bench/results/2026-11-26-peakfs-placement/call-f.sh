#!/usr/bin/env bash
# Call F (final): the committed build, `peakfs bench --local-cluster 4 --local-workers 2
# --local-pin` 16 times (empty-file phases), then 8 servers x 1 worker 6 times, then the whole
# bench (every mdtest phase incl. 3,901-byte files, and IOR) twice per layout.
set -u
O=${1:?}; B=gpu-run/f
nproc; date -u
for i in $(seq ${RUNS:-16}); do
  $B/peakfs bench --local-cluster 4 --local-workers 2 --local-pin --local-data-mib 2048 --procs 8 \
    --files 10000 --only create-empty --only stat-empty --only remove-empty --json > $O/a$i.jsonl 2> $O/a$i.err || { echo FAILED; tail -3 $O/a$i.err; }
done
for i in $(seq ${RUNS8:-6}); do
  $B/peakfs bench --local-cluster 8 --local-workers 1 --local-pin --local-data-mib 1024 --procs 8 \
    --files 10000 --only create-empty --only stat-empty --only remove-empty --json > $O/b$i.jsonl 2> $O/b$i.err || { echo FAILED; tail -3 $O/b$i.err; }
done
for i in 1 2; do
  $B/peakfs bench --local-cluster 4 --local-workers 2 --local-pin --local-data-mib 4096 --procs 8 \
    --files 10000 --ior-mib 256 --json > $O/c$i.jsonl 2> $O/c$i.err || { echo FAILED; tail -3 $O/c$i.err; }
  $B/peakfs bench --local-cluster 8 --local-workers 1 --local-pin --local-data-mib 2048 --procs 8 \
    --files 10000 --ior-mib 256 --json > $O/d$i.jsonl 2> $O/d$i.err || { echo FAILED; tail -3 $O/d$i.err; }
done
python3 - $O <<'PY'
import glob, json, statistics, sys
for tag, what in [("a", "4x2 pinned, empty files"), ("b", "8x1 pinned, empty files"), ("c", "4x2 pinned, whole bench"), ("d", "8x1 pinned, whole bench")]:
    runs = {}; abs_ = {}
    for f in sorted(glob.glob(f"{sys.argv[1]}/{tag}[0-9]*.jsonl")):
        for l in open(f):
            if l.startswith("{"):
                r = json.loads(l); w = r["workload"]
                if w.startswith("ior"):
                    runs.setdefault(w, []).append(r["bytes"] / r["duration_s"] / 1e9); abs_.setdefault(w, []).append(0); continue
                runs.setdefault(w, []).append(r["iops"] if w == "echo-sync" else r["extra"].get("fraction_of_echo_sync", 0))
                abs_.setdefault(w, []).append(r["iops"] / 1e3)
    print(f"== {what}")
    for w, v in runs.items():
        if w != "echo-pipelined":
            unit = "GB/s" if w.startswith("ior") else f"{statistics.median(abs_[w]):.0f}K ops/s"
            print(f"{tag} MEDIAN {w:32} {statistics.median(v):10.3f}  ({min(v):.3f}-{max(v):.3f}, {len(v)} runs)  {unit}")
PY
ls /dev/shm | grep -c peakfs-local || true
date -u
