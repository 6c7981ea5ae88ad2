#!/usr/bin/env bash
# Call D: the slice bench of the stop's final build (fin5) on 16 cores, three times (call C's
# slice bench ran out of data pages: frees waiting for a commit, fixed in f9dc5e4).
set -u
nproc; date -u
for i in 1 2 3; do
  echo "== slice $i"; gpu-run/fin5/peakfs-slice-bench --files 20000 --rounds 5 --backend mmap --writes 2000 2>&1 | grep -E "ns per request|Error"
done
date -u
