#!/usr/bin/env bash
# Call C: the last stop at a million inodes with the log caught up after 256 KiB (adapt) or
# 64 KiB (adapt64, the committed code) since the take, against 256 KiB pieces (s256):
# peakfs-slice-bench only, builds rotating. ROUNDS rounds. Usage: call-c.sh OUT (from the
# repository root; builds in gpu-run/step/).
set -u
O=${1:?}; G=${G:-gpu-run/step}; mkdir -p $O; date -u
for i in $(seq 1 ${ROUNDS:-2}); do
  case $(( i % 3 )) in 1) o="s256 adapt adapt64";; 2) o="adapt64 s256 adapt";; 0) o="adapt adapt64 s256";; esac
  for b in $o; do
    $G/$b/peakfs-slice-bench --files 1000000 --rounds 1 --bytes-per-inode 4096 --data-mib 8192 > $O/slice$i-$b.txt 2>&1 || echo FAILED $b
    echo "== slice$i $b"; grep -E "^create|checkpoint stops" $O/slice$i-$b.txt | cut -c1-150
  done
done
date -u
