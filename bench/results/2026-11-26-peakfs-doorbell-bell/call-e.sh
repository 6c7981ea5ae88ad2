#!/usr/bin/env bash
# Call E: the GPU paths before (base = da41fb7) and after the bells (cur = the bundle of
# 8475485, `cargo xtask gpu-bundle`): SwarmIO's GPU-initiated 512 B reads at the paper's
# 40 MIOPS target, 4 alternating runs each, and the GoFS bench once each (its image on /tmp:
# /dev/shm on this host had no room for it in call D).
set -u
O=${1:?}; nproc; date -u; nvidia-smi --query-gpu=name --format=csv,noheader; df -h /dev/shm /tmp | tail -2
frac() { python3 -c "
import json,sys
for l in open('$1'):
    if l.startswith('{'):
        r=json.loads(l); print('$2', r['workload'], '%.2f MIOPS'%(r['iops']/1e6), 'fraction_of_target %.3f'%r['extra'].get('fraction_of_target',0))"; }
for i in 1 2 3 4; do for b in base cur; do
  bin=gpu-bundle/bin; [ $b = base ] && bin=gpu-run/base-bundle
  $bin/swarmio bench --json --initiator gpu --threads 65536 --queues 256 --block-size 512 --target-miops 40 --units 2 --workers 6 > $O/swarmio-$b-$i.jsonl 2> $O/swarmio-$b-$i.err || echo "FAILED swarmio $b $i"
  frac $O/swarmio-$b-$i.jsonl "$b $i"
done; done | tee $O/swarmio.txt
for b in base cur; do
  bin=gpu-bundle/bin; [ $b = base ] && bin=gpu-run/base-bundle
  $bin/gofs bench --json --image-mib 512 --image /tmp/gofs-bench-$b.img > $O/gofs-$b.jsonl 2> $O/gofs-$b.err || { echo "FAILED gofs $b"; tail -3 $O/gofs-$b.err; }
  rm -f /tmp/gofs-bench-$b.img
  python3 -c "
import json
for l in open('$O/gofs-$b.jsonl'):
    if l.startswith('{'):
        r=json.loads(l); e=r['extra']
        print('$b', r['workload'], r.get('engine',''), '%.0f IOPS'%r['iops'], {k: round(v,3) for k,v in e.items() if isinstance(v,float) and ('ratio' in k or 'fraction' in k)})"
done | tee $O/gofs.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
