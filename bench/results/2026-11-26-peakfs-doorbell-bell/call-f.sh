#!/usr/bin/env bash
# Call F: the GoFS bench (host engine on the file controller, raw controller runs alternating
# in the same run) before (base = da41fb7) and after the bells (cur = the bundle of 8475485), on
# its default 1 GiB tmpfs image, alternating, two runs each.
set -u
O=${1:?}; nproc; date -u; nvidia-smi --query-gpu=name --format=csv,noheader
for i in 1 2; do for b in base cur; do
  bin=gpu-bundle/bin; [ $b = base ] && bin=gpu-run/base-bundle
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
