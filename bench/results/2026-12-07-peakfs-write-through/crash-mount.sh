#!/bin/bash
# Through the FUSE mount: 20 files of 100,000 random bytes in a new directory, a 3,901-byte
# file and a copy of /usr/include/linux/netfilter, closed without fsync; then kill -9 of both
# servers, a restart at the same addresses, and md5sum of every file again.
# Usage: [B=DIR-OF-RELEASE-BINARIES] crash-mount.sh
set -u
B=${B:-/work/main/target/release}
D=/tmp/ck/run; M=/tmp/ck/mnt
umount -l $M 2>/dev/null; pkill -9 -f peakfs-server; pkill -f peakfs-master; sleep 0.3
rm -rf $D; mkdir -p $D $M
$B/peakfs-master --listen 127.0.0.1:7500 > $D/master.log 2>&1 &
sleep 0.5
srv() { $B/peakfs-server --master 127.0.0.1:7500 --listen 127.0.0.1:750$1 --data $D/s$1.data --data-size $((512<<20)) --workers 2 > $D/s$1.$2.log 2>&1 & }
srv 1 a; srv 2 a; sleep 1
$B/peakfs mount --master 127.0.0.1:7500 $M > $D/mount.log 2>&1 &
sleep 1
mkdir -p $M/dir
for i in $(seq 1 20); do head -c 100000 /dev/urandom > $M/dir/f$i; done
head -c 3901 /dev/urandom > $M/small
cp -r /usr/include/linux/netfilter $M/tree
( cd $M && find . -type f | sort | xargs md5sum ) > $D/before.md5
pkill -9 -f peakfs-server; sleep 0.3
srv 1 b; srv 2 b; sleep 1.5
( cd $M && find . -type f | sort | xargs md5sum ) > $D/after.md5 2>$D/after.err
if diff -q $D/before.md5 $D/after.md5; then echo "SAME: $(wc -l < $D/before.md5) files"; else echo DIFFERENT; diff $D/before.md5 $D/after.md5 | head; cat $D/after.err | head; fi
umount -l $M; pkill -f peakfs-server; pkill -f peakfs-master
