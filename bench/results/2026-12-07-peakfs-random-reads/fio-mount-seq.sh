#!/usr/bin/env bash
set -u
B=$1; P=$2; W=/tmp/rr/w$P; rm -rf $W; mkdir -p $W/mnt
$B/peakfs-master --listen 127.0.0.1:$P --servers 2 > $W/m.log 2>&1 &
sleep 0.5
for i in 1 2; do $B/peakfs-server --master 127.0.0.1:$P --listen 127.0.0.1:0 --data $W/d$i --data-size $((512<<20)) --workers 1 --no-pin > $W/s$i.log 2>&1 & done
sleep 2
$B/peakfs --master 127.0.0.1:$P mount $W/mnt --threads 4 > $W/mnt.log 2>&1 &
sleep 2
cd $W/mnt
fio --name=prep --filename=f --rw=write --bs=1M --size=128M > /dev/null 2>&1
for i in 1 2 3; do for bs in 4k 1M; do
  printf "read bs=%s " $bs
  fio --name=r --filename=f --rw=read --bs=$bs --size=128M --direct=0 --invalidate=1 2>&1 | grep -oE "BW=[^ ]*"
done; done
cd /tmp; umount $W/mnt; sleep 1; pkill -f "127.0.0.1:$P" ; sleep 1
