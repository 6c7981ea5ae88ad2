#!/usr/bin/env bash
# A/B of PeakFS builds, alternating (old, new, old, new, ...): each run is a fresh cluster
# (ci/peakfs-cluster.sh, 2 servers unless PEAKFS_SERVERS says otherwise) and one `peakfs bench`
# of the empty-file mdtest phases (private directories and the bigdir) with the RPC echo
# ceiling of the same run. The machine's speed moves between runs and within them, so compare
# medians of several rounds, never single runs.
# Usage: [ROUNDS=3] [PROCS=4] [FILES=10000] bash bench/peakfs-ab.sh OLD_BIN_DIR NEW_BIN_DIR [MORE...]
#   (JSON lines appended to $OUT/peakfs-ab.jsonl, $OUT defaults to /tmp; every ci/peakfs-*
#   variable such as PEAKFS_SERVER_WORKERS or PEAKFS_PIN applies to both builds;
#   PEAKFS_CLIENT_CPUS, e.g. 8-15, keeps the bench processes on those cores)
set -u
rounds=${ROUNDS:-3}; procs=${PROCS:-4}; files=${FILES:-10000}; O=${OUT:-/tmp}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$O"
export TS=${PEAKFS_CLIENT_CPUS:+taskset -c $PEAKFS_CLIENT_CPUS}
for i in $(seq "$rounds"); do
  for b in "$@"; do
    PEAKFS_BIN_DIR=$b timeout 300 bash "$ROOT/ci/peakfs-cluster.sh" --servers "${PEAKFS_SERVERS:-2}" -- \
      bash -c "\$TS \$PEAKFS --master \$PEAKFS_MASTER bench --procs $procs --files $files --echo-ops 100000 \
        --only create-empty --only stat-empty --only remove-empty --json" > "$O/peakfs-ab.tmp" 2>"$O/peakfs-ab.err" \
      || { echo "FAILED $b"; tail -5 "$O/peakfs-ab.err"; }
    sed "s|^{|{\"ab_bin\":\"$b\",\"ab_round\":$i,|" "$O/peakfs-ab.tmp" >> "$O/peakfs-ab.jsonl"
    python3 - "$b" "$i" "$O/peakfs-ab.tmp" <<'PY'
import json, sys
rs = {}
for l in open(sys.argv[3]):
    if l.startswith("{"):
        r = json.loads(l)
        rs[r["workload"]] = r
short = lambda w: w.replace("mdtest-", "").replace("-empty", "")
cells = [f'echo {rs.get("echo-sync", {}).get("iops", 0):7.0f}']
for w, r in rs.items():
    if w.startswith("mdtest") or w == "echo-spread":
        cells.append(f'{short(w)} {r["extra"]["fraction_of_echo_sync"]:.3f}')
print(f'round {sys.argv[2]} {sys.argv[1]:24} ' + '  '.join(cells))
PY
  done
done
