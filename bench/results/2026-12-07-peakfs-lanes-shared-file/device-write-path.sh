#!/usr/bin/env bash
# Usage: device-write-path.sh RUN_DIR — for each build in BUILDS (default "dio spread
# gate"), ROUNDS times (default "1 2"), alternated: a master, 4 servers x 2 workers
# (unpinned) on loopback, `peakfs mount --threads 8`, and RUN_DIR/mount-load2: 4 KiB O_DIRECT
# random writes from 8 threads, a file each, 5 s, twice; then 8 threads reading one file.
set -u
R=$(cd "$1" && pwd); P=7850
for round in ${ROUNDS:-1 2}; do for build in ${BUILDS:-dio spread gate}; do
  B=$R/$build; P=$((P + 1)); W=/tmp/wp/w$P; rm -rf $W; mkdir -p $W/mnt
  echo "== $build round $round"
  $B/peakfs-master --listen 127.0.0.1:$P --servers 4 > $W/m.log 2>&1 &
  sleep 0.5
  for i in 1 2 3 4; do
    $B/peakfs-server --master 127.0.0.1:$P --listen 127.0.0.1:0 --data $W/d$i \
      --data-size $((2<<30)) --workers 2 --no-pin > $W/s$i.log 2>&1 &
  done
  sleep 2
  $B/peakfs --master 127.0.0.1:$P mount $W/mnt --threads 8 > $W/mnt.log 2>&1 &
  for _ in $(seq 50); do mountpoint -q $W/mnt && break; sleep 0.2; done
  mountpoint -q $W/mnt || { echo "no mount"; cat $W/mnt.log; exit 1; }
  $R/mount-load2 $W/mnt randwrite 8 5
  $R/mount-load2 $W/mnt randwrite 8 5
  $R/mount-load2 $W/mnt sharedread 8 5
  umount $W/mnt; sleep 1; pkill -f "127.0.0.1:$P"; sleep 1
done; done
