#!/usr/bin/env bash
# Call G: as call F, with cur2 (a bell per controller worker; built with `cargo build --profile
# bundle -p gofs -p swarmio`) in place of cur, three runs each, on
# GoFS's default 1 GiB tmpfs image, alternating.
set -u
O=${1:?}; nproc; date -u; nvidia-smi --query-gpu=name --format=csv,noheader
for i in 1 2 3; do for b in base cur2; do
  bin=gpu-run/$b; [ $b = base ] && bin=gpu-run/base-bundle
  timeout 280 $bin/gofs bench --json --image /dev/shm/gofs-bench-$b.img > $O/gofs-$b-$i.jsonl 2> $O/gofs-$b-$i.err || { echo "FAILED gofs $b $i"; tail -3 $O/gofs-$b-$i.err; }
  rm -f /dev/shm/gofs-bench-$b.img
  python3 -c "
import json
out=[]
for l in open('$O/gofs-$b-$i.jsonl'):
    if l.startswith('{'):
        r=json.loads(l)
        if r['system']!='gofs': continue
        e=r.get('extra',{}); rr=['%s %.3f'%(k[len('ratio_to_raw'):] or 'raw',v) for k,v in e.items() if k.startswith('ratio_to_raw')]
        out.append(r['workload']+' %.0fK'%(r['iops']/1e3)+(' ('+', '.join(rr)+')' if rr else ''))
print('$b $i', ' | '.join(out))"
done; done | tee $O/gofs.txt
date -u
cd $O && tar czf runs.tgz *.jsonl *.err && rm -f *.jsonl *.err && ls
