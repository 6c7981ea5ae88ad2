#!/usr/bin/env bash
# Call G: call D's profile of the build before the log written ahead (gpu-run/fp) and of
# `ahead2` (gpu-run/fp2), both with frame pointers, one after the other.
# Usage: call-g.sh OUT
set -u
O=${1:?}
for b in fp fp2; do
  echo "=== $b"
  G=gpu-run/$b bash bench/results/2026-11-27-peakfs-procs/call-d.sh $O/$b 2>&1 | grep -v BrokenPipe
done
