#!/usr/bin/env bash
# ab.sh OUTDIR ROUNDS PROCS CLIENT_CPUS BIN...: alternate builds, 1 server x 1 worker pinned to core 0 (PEAKFS_PIN=), clients under taskset
O=$1; R=$2; P=$3; CPUS=$4; shift 4
mkdir -p $O
cd /work/main
for i in $(seq $R); do for b in "$@"; do
  PEAKFS_PIN= PEAKFS_BIN_DIR=$b PEAKFS_SERVER_WORKERS=1 timeout 300 ci/peakfs-cluster.sh --servers 1 -- \
    bash -c "taskset -c $CPUS \$PEAKFS --master \$PEAKFS_MASTER bench --procs $P --files ${FILES:-10000} --echo-ops ${ECHO:-50000} --only create-empty --only stat-empty --only remove-empty --json" > $O/tmp 2>$O/err || { echo FAILED $b; tail -3 $O/err; }
  sed "s|^{|{\"ab_bin\":\"$b\",\"ab_round\":$i,|" $O/tmp | grep '^{' >> $O/peakfs-ab.jsonl
  python3 - $b $i $O/tmp <<'PY'
import json, sys
rs = {json.loads(l)["workload"]: json.loads(l) for l in open(sys.argv[3]) if l.startswith("{")}
cells = [f'echo {rs.get("echo-sync", {}).get("iops", 0):7.0f}'] + [f'{w.replace("mdtest-","").replace("-empty","")} {r["iops"]/1e3:5.1f}K {r["extra"]["fraction_of_echo_sync"]:.3f}' for w, r in rs.items() if w.startswith("mdtest")]
print(f'round {sys.argv[2]} {sys.argv[1].split("/")[-1]:8} ' + '  '.join(cells))
PY
done; done
