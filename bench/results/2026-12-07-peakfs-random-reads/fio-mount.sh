#!/usr/bin/env bash
# Usage: run.sh BUILD_DIR PORT — a master, 2 servers (1 worker each), a mount; fio on it.
set -u
B=$1; P=$2; W=/tmp/rr/w$P; rm -rf $W; mkdir -p $W/mnt
$B/peakfs-master --listen 127.0.0.1:$P --servers 2 > $W/m.log 2>&1 & M=$!
sleep 0.5
for i in 1 2; do $B/peakfs-server --master 127.0.0.1:$P --listen 127.0.0.1:0 --data $W/d$i --data-size $((512<<20)) --workers 1 --no-pin > $W/s$i.log 2>&1 & done
sleep 2
$B/peakfs --master 127.0.0.1:$P mount $W/mnt --threads 4 > $W/mnt.log 2>&1 &
sleep 2
cd $W/mnt
fio --name=prep --filename=f --rw=write --bs=1M --size=64M > /dev/null 2>&1
for rw in randread read; do for d in 1 0; do
  printf "%-9s direct=%d " $rw $d
  fio --name=r --filename=f --rw=$rw --bs=4k --size=64M --direct=$d --time_based --runtime=6 --invalidate=1 2>&1 | grep -oE "IOPS=[^,]*, BW=[^ ]*"
done; done
cd /tmp; umount $W/mnt; sleep 1; pkill -f "127.0.0.1:$P" ; sleep 1
