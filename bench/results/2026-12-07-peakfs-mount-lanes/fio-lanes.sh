#!/usr/bin/env bash
# Usage: fio-lanes.sh BUILD_DIR PORT — a master, 2 servers (1 worker each), `peakfs mount
# --threads 4`, then fio jobs of 1 and 4 processes (each its own 32 MiB file) and fs_mark
# with 1 and 4 threads (each its own directory) on the mount.
set -u
B=$1; P=$2; W=/tmp/lanes/w$P; rm -rf $W; mkdir -p $W/mnt
$B/peakfs-master --listen 127.0.0.1:$P --servers 2 > $W/m.log 2>&1 &
sleep 0.5
for i in 1 2; do $B/peakfs-server --master 127.0.0.1:$P --listen 127.0.0.1:0 --data $W/d$i --data-size $((1<<30)) --workers 1 --no-pin > $W/s$i.log 2>&1 & done
sleep 2
$B/peakfs --master 127.0.0.1:$P mount $W/mnt --threads 4 > $W/mnt.log 2>&1 &
sleep 2
cd $W/mnt
for rw in randread randwrite; do for jobs in 1 4; do
  printf "%-9s 4k direct jobs=%d " $rw $jobs
  fio --name=r --rw=$rw --bs=4k --size=32M --numjobs=$jobs --direct=1 --time_based --runtime=6 \
      --group_reporting 2>&1 | grep -oE "IOPS=[^,]*, BW=[^ ]*"
done; done
rm -f r.*
for t in 1 4; do
  printf "fs_mark -s 0 -n 500 -t %d " $t
  fs_mark -d $W/mnt/fsm$t -s 0 -n 500 -t $t -S 0 -L 1 2>&1 | awk '/^ *[0-9]+ +[0-9]+ +[0-9]+/ {print $4 " files/s"}'
done
cd /tmp; umount $W/mnt; sleep 1; pkill -f "127.0.0.1:$P" ; sleep 1
