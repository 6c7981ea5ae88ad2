#!/usr/bin/env bash
# Call A: old (bd1920c's cART, whose jump table and stem index rehash whole when they double)
# against new (pstore::probe::Growing: they double without a stop). Both builds carry the
# same peakfs-cart-bench (the longest 64 puts; zeroed allocations as the system allocator
# makes them). Part 1: peakfs-cart-bench --names 10000000, rounds old new new old old new.
# Part 2: the 16-core metadata phases, ABBA, through the previous stop's call-a.sh
# (8 x 1 empty files, 4 rounds; 4 x 2, 2 rounds). Usage: call-a.sh OUT
set -u
O=${1:?}; G=gpu-run/grow; mkdir -p $O; nproc; date -u
for b in old new new old old new; do
  echo "== cart $b"; $G/$b/peakfs-cart-bench --names 10000000 --only get-rand 2>&1 | tail -4
done | tee $O/cart.txt
mkdir -p $O/md; E8=4 S8=0 E4=2 bash bench/results/2026-11-27-peakfs-icache-late-copy/call-a.sh $O/md old new $G
date -u
