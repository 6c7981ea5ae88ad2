#!/usr/bin/env bash
# The 2-core box (this VM): base2 (47bf33f) against flush (7c83a11), `peakfs bench
# --local-cluster 2 --local-workers 1 --procs 4 --files 10000`, empty files, ABBA.
set -u
R=${1:-6}
for i in $(seq 1 $R); do
  if (( i % 2 )); then order="base2 flush"; else order="flush base2"; fi
  for b in $order; do
    echo "== $b $i"
    gpu-run/stop/$b/peakfs bench --procs 4 --local-cluster 2 --local-workers 1 --files 10000 \
      --only create-empty --only stat-empty --only remove-empty --json 2>/dev/null |
      python3 -c '
import sys, json
out = []
for l in sys.stdin:
    if l.startswith("{"):
        r = json.loads(l)
        f = r["extra"].get("fraction_of_echo_sync")
        if f is not None and r["workload"] in ("echo-sync", "echo-spread") or "mdtest" in r["workload"]:
            out.append("%s %.0f %.3f" % (r["workload"], r["iops"], f))
print(" | ".join(out))'
  done
done
