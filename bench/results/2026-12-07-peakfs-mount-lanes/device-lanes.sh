#!/usr/bin/env bash
# Usage: device-lanes.sh RUN_DIR SERVERS WORKERS THREADS — for each build in RUN_DIR/old and
# RUN_DIR/new, twice, alternated: a master, SERVERS servers (WORKERS workers each, unpinned)
# on loopback, `peakfs mount --threads THREADS`, and RUN_DIR/mount-load on the mount:
# 4 KiB O_DIRECT random reads and writes from 1, 4 and 8 threads (5 s each, a file each),
# and create/stat/unlink of 2,000 empty files per thread from 1, 4 and 8 threads. ROUNDS,
# BUILDS and IO_MODES (set empty: metadata only) narrow the run.
set -u
R=$(cd "$1" && pwd); S=$2; WK=$3; T=$4; P=7900
for round in ${ROUNDS:-1 2}; do for build in ${BUILDS:-old new}; do
  B=$R/$build; P=$((P + 1)); W=/tmp/lanes/w$P; rm -rf $W; mkdir -p $W/mnt
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
  for mode in ${IO_MODES-randread randwrite}; do for p in 1 4 8; do
    $R/mount-load $W/mnt $mode $p 5
  done; done
  for p in 1 4 8; do $R/mount-load $W/mnt create $p 2000; done
  umount $W/mnt; sleep 1; pkill -f "127.0.0.1:$P"; sleep 1
done; done
