#!/usr/bin/env bash
# Usage: device-shared.sh RUN_DIR SERVERS WORKERS THREADS — for each build in BUILDS
# (default "new", folders of RUN_DIR), ROUNDS times (default "1 2"), alternated: a master,
# SERVERS servers (WORKERS workers each, unpinned) on loopback, `peakfs mount --threads
# THREADS`, and RUN_DIR/mount-load2 on the mount: 4 KiB O_DIRECT random reads and writes from
# 1 and 8 threads, each on a file of its own (rand*) or all on one file (shared*), 5 s each;
# then create/stat/unlink of 2,000 empty files per thread from 1 and 8 threads.
set -u
R=$(cd "$1" && pwd); S=$2; WK=$3; T=$4; P=7950
for round in ${ROUNDS:-1 2}; do for build in ${BUILDS:-new}; do
  B=$R/$build; P=$((P + 1)); W=/tmp/shared/w$P; rm -rf $W; mkdir -p $W/mnt
  echo "== $build round $round (servers $S x $WK workers, mount --threads $T)"
  $B/peakfs-master --listen 127.0.0.1:$P --servers $S > $W/m.log 2>&1 &
  sleep 0.5
  for i in $(seq 1 $S); do
    $B/peakfs-server --master 127.0.0.1:$P --listen 127.0.0.1:0 --data $W/d$i \
      --data-size $((2<<30)) --workers $WK --no-pin > $W/s$i.log 2>&1 &
  done
  sleep 2
  $B/peakfs --master 127.0.0.1:$P mount $W/mnt --threads $T > $W/mnt.log 2>&1 &
  for _ in $(seq 50); do mountpoint -q $W/mnt && break; sleep 0.2; done
  mountpoint -q $W/mnt || { echo "no mount"; cat $W/mnt.log; exit 1; }
  for run in "randread 1" "randread 8" "sharedread 8" "randwrite 8" "sharedwrite 8"; do
    $R/mount-load2 $W/mnt $run 5
  done
  for p in 1 8; do $R/mount-load2 $W/mnt create $p 2000; done
  umount $W/mnt; sleep 1; pkill -f "127.0.0.1:$P"; sleep 1
done; done
