#!/usr/bin/env bash
# cpu.sh OUT ROUNDS BIN...: 1x1, spin 0, 2 procs, CPU us/op per thread group per phase (sampler), alternating builds
O=$1; R=$2; shift 2; mkdir -p $O
for i in $(seq $R); do for b in "$@"; do
  n=$(basename $b)-$i
  PEAKFS_SPIN_US=0 /tmp/p/run1.sh $b $n 2 ${FILES:-20000} > $O/$n.txt 2>&1
  cp /tmp/p/$n.log /tmp/p/$n.out $O/ 2>/dev/null
  rm -f /tmp/p/$n.samples
done; done
