#!/usr/bin/env bash
# Call H: the raw host path alone, base (da41fb7) against cur2 (a bell per controller worker):
# nvme-bench, CPU initiator, one thread, one queue of depth 64, 4 KiB random and sequential
# reads over a 1 GiB tmpfs file, file controller with 2 workers (one idle, as in GoFS's raw
# runs), 2 s a run; order ABBA over 6 rounds so that a drift of the host favours neither.
set -u
O=${1:?}; nproc; date -u
gpu-run/nb-base/nvme-bench --initiator cpu --controller file:/dev/shm/nb.img --create-mib 1024 --threads 1 --queues 1 --queue-depth 64 --workers 2 --block-size 4096 --pattern seq --duration 1 --json > /dev/null 2>&1
for i in 1 2 3 4 5 6; do
  if (( i % 2 )); then order="base cur2"; else order="cur2 base"; fi
  for b in $order; do for p in rand seq; do
    gpu-run/nb-$b/nvme-bench --initiator cpu --controller file:/dev/shm/nb.img --threads 1 --queues 1 --queue-depth 64 --workers 2 --block-size 4096 --pattern $p --duration 2 --json 2> $O/nb-$b-$p-$i.err > $O/nb-$b-$p-$i.jsonl || echo "FAILED $b $p $i"
  done; done
done
python3 - "$O" <<'PY' | tee $O/summary.txt
import json, glob, statistics as st, sys, collections
d = collections.defaultdict(list)
for f in sorted(glob.glob(sys.argv[1] + "/nb-*.jsonl")):
    _, b, p, i = f[:-6].rsplit("/", 1)[1].split("-")
    for l in open(f):
        if l.startswith("{"):
            d[(b, p)].append(json.loads(l)["iops"] / 1e3)
for (b, p), v in sorted(d.items()):
    print(f"{b:5s} {p:4s} median {st.median(v):.0f}K  runs " + " ".join(f"{x:.0f}" for x in v))
PY
rm -f /dev/shm/nb.img; date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
