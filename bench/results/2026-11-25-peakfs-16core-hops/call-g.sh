#!/usr/bin/env bash
# Call G: PeakFS old (8df5f3c) against new (rings served after every client frame, admin thread
# backoff), 8 bench processes, mmap backend, 2 GiB per server.
set -u
nproc; grep -m1 'model name' /proc/cpuinfo; date -u
export PEAKFS_BACKEND=mmap
OUT=$1/g-4x2s ROUNDS=4 LAYOUTS="4x2s" bash bench/peakfs-bigdir-layouts.sh gpu-run/g/old gpu-run/g/new gpu-run/g/new-spin1k
OUT=$1/g-4x4 ROUNDS=2 LAYOUTS="4x4" bash bench/peakfs-bigdir-layouts.sh gpu-run/g/old gpu-run/g/new
date -u
