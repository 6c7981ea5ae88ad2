#!/usr/bin/env bash
# Call M2: the final build (n2) on 16 cores. Part 1: peakfs-slice-bench, b1 (4f00867) against
# n2, with and without 900 MiB of another file's blocks mapped, alternating, twice. Part 2: the
# whole bench twice (every phase, IOR 256 MiB per process), n2 alone.
set -u
O=${1:?}; nproc; date -u
for i in 1 2; do for b in b1 n2; do for m in 0 900; do
  echo -n "slice $b other=$m round $i: "
  gpu-run/$b/peakfs-slice-bench --files 20000 --rounds 3 --other-mib $m --json > $O/slice-$b-$m-$i.jsonl 2>$O/slice-$b-$m-$i.err || echo FAILED
  python3 -c "
import json,sys
print(' | '.join(f\"{r['workload']} {r['extra']['ns_per_op']:.0f} ns p99 {r['latency_us']['p99']:.2f} us\" for r in map(json.loads, open(sys.argv[1]))))" $O/slice-$b-$m-$i.jsonl
done; done; done
for i in 1 2; do
  gpu-run/n2/peakfs bench --local-pin --procs 8 --files 10000 --local-cluster 4 --local-workers 2 --local-data-mib 4096 --ior-mib 256 --json > $O/whole-$i.jsonl 2> $O/whole-$i.err || { echo FAILED; tail -3 $O/whole-$i.err; }
  python3 - $O/whole-$i.jsonl $i <<'PY'
import json, sys
out = []
for l in open(sys.argv[1]):
    if l.startswith("{"):
        r = json.loads(l); w = r["workload"].replace("mdtest-", "")
        if w.startswith("ior"):
            out.append(f'{w} {r["bytes"]/r["duration_s"]/1e9:.2f} GB/s')
        elif w == "echo-sync":
            out.append(f'echo-sync {r["iops"]/1e3:.0f}K')
        elif w != "echo-pipelined":
            out.append(f'{w} {r["extra"]["fraction_of_echo_sync"]:.3f}')
print("whole", sys.argv[2], " | ".join(out))
PY
done
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
