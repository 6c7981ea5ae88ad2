#!/usr/bin/env bash
# Call M: PeakFS metadata, 4 servers x 2 workers pinned (--cpus) with clients on cores 8-15:
# dd7a934 (workers spin 50 us) against the working tree (unset spin_us is 1 ms when the
# workers have cores of their own), alternating, 3 rounds, 8 processes x 10,000 files.
set -u
O=${1:?}; B=gpu-run/h
nproc; date -u
PEAKFS_BACKEND=mmap OUT=$O/m ROUNDS=3 LAYOUTS="4x2s" bash bench/peakfs-bigdir-layouts.sh $B/zone $B/spin
date -u
