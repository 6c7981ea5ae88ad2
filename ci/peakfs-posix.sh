#!/usr/bin/env bash
# POSIX conformance of the PeakFS FUSE mount: a master + 2 servers (ci/peakfs-cluster.sh, on
# localhost), `peakfs mount` and for a while a second one (what one client closed, the other
# reads), the workloads of ci/posix-lib.sh (fio --verify jobs, a tar copy of a tree, a git
# clone, SQLite, fs_mark and dbench: any failure is fatal) and pjdfstest
# (failures counted; more than the recorded baseline is fatal); then SIGTERM unmount and
# teardown. Needs root, /dev/fuse, fio, git, tar, python3, fsmark, dbench and pjdfstest. With
# --netns the cluster's hosts get network namespaces of their own (peakfs-cluster.sh --netns),
# so every request of the mount crosses veth pairs and a bridge.
#
#   ci/peakfs-posix.sh
#   ci/peakfs-posix.sh --netns
#   PJDFSTEST_PATTERNS="chmod open" ci/peakfs-posix.sh
#
# The baseline (most pjdfstest failures accepted) and the reason of each failure category are
# in bench/results/peakfs-pjdfstest.md; lower PEAKFS_PJDFSTEST_MAX_FAILED when the client
# improves.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAME=peakfs-posix
# shellcheck source=ci/posix-lib.sh
source "$ROOT/ci/posix-lib.sh"
if [[ "${1:-}" != --inner ]]; then
  CLUSTER_ARGS=(--servers 2)
  case "${1:-}" in
    --netns) CLUSTER_ARGS+=(--netns) ;;
    "") ;;
    *) echo "peakfs-posix: unknown argument $1" >&2; exit 2 ;;
  esac
  PJDFSTEST=${PJDFSTEST:-$(command -v pjdfstest || echo "$ROOT/.cache/cargo-bin/bin/pjdfstest")}
  for tool in fio fs_mark dbench git tar python3 "$PJDFSTEST"; do
    command -v "$tool" >/dev/null || { echo "peakfs-posix: $tool is missing" >&2; exit 2; }
  done
  [[ -e /dev/fuse && $(id -u) == 0 ]] || { echo "peakfs-posix: needs root and /dev/fuse" >&2; exit 2; }
  # Two workers per server on any host, so that requests also cross workers (RingSched's
  # forwarding), not only servers.
  export PJDFSTEST PEAKFS_SERVER_WORKERS=${PEAKFS_SERVER_WORKERS:-2}
  exec "$ROOT/ci/peakfs-cluster.sh" "${CLUSTER_ARGS[@]}" -- "$0" --inner
fi

# Inner part: runs inside the cluster (PEAKFS, PEAKFS_MASTER set by peakfs-cluster.sh).
MAX_FAILED=${PEAKFS_PJDFSTEST_MAX_FAILED:-0}
WORK=$(mktemp -d /dev/shm/peakfs-posix.XXXXXX)
chmod 755 "$WORK" # pjdfstest switches to unprivileged users, who must reach the mount
MNT=$WORK/mnt
MNT2=$WORK/mnt2
MOUNT_PID=
MOUNT2_PID=
unmount() { # PID MOUNTPOINT
  if [[ -n "$1" ]] && kill -0 "$1" 2>/dev/null; then
    kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
  fi
  if mountpoint -q "$2" 2>/dev/null; then fusermount3 -u -z "$2" || umount -l "$2" || true; fi
}
cleanup() {
  local rc=$?
  unmount "$MOUNT2_PID" "$MNT2"
  unmount "$MOUNT_PID" "$MNT"
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mount_at() { # MOUNTPOINT LOG; sets MOUNTED_PID
  mkdir "$1"
  "$PEAKFS" --master "$PEAKFS_MASTER" --timeout-ms 5000 mount "$1" >/dev/null 2>"$2" &
  MOUNTED_PID=$!
  for _ in $(seq 200); do mountpoint -q "$1" && break; sleep 0.05; done
  mountpoint -q "$1" || { cat "$2"; echo "peakfs-posix: no mount at $1" >&2; exit 1; }
}
mount_at "$MNT" "$WORK/mount.log"
MOUNT_PID=$MOUNTED_PID

echo "== fio --verify"
fio_job randwrite --rw=randwrite
fio_job seqwrite --rw=write --bs=64k
fio_job randrw --rw=randrw --verify=md5 --size=16M
fio_job n1-47008 --rw=write --bs=47008 --size=16M
rm -f "$MNT"/fio-*
# Placement hints are extended attributes of the mount (user.peakfs.dist, .io_unit).
xattr() { python3 -c 'import os, sys
if len(sys.argv) == 4: os.setxattr(sys.argv[1], sys.argv[2], sys.argv[3].encode())
else: print(os.getxattr(sys.argv[1], sys.argv[2]).decode())' "$@"; }
# I/O-based files (each I/O unit on the slice of its first byte, the unit fixed by the first
# write), read back by the kernel at other offsets and sizes than fio wrote.
mkdir "$MNT/fio-io"
xattr "$MNT/fio-io" user.peakfs.dist io
[[ $(xattr "$MNT/fio-io" user.peakfs.dist) == io* ]] || { echo "peakfs-posix: no io hint" >&2; exit 1; }
fio_job io-randwrite --directory="$MNT/fio-io" --rw=randwrite
fio_job io-n1-47008 --directory="$MNT/fio-io" --rw=write --bs=47008 --size=16M
fio_job io-randrw --directory="$MNT/fio-io" --rw=randrw --bs=64k --verify=md5 --size=16M
# fio reads back what it wrote with the sizes it wrote; cmp reads in its own, through units:
# N-1 transfers, then an overwrite of another size across them.
head -c 9000000 /dev/urandom >"$WORK/io-src"
dd if="$WORK/io-src" of="$MNT/fio-io/copy" bs=47008 status=none
head -c 500000 /dev/urandom | dd of="$WORK/io-src" bs=10000 seek=333 conv=notrunc status=none
dd if="$WORK/io-src" of="$MNT/fio-io/copy" bs=10000 skip=333 seek=333 count=50 conv=notrunc status=none
cmp "$WORK/io-src" "$MNT/fio-io/copy" || { echo "peakfs-posix: I/O-based copy differs" >&2; exit 1; }
unit=$("$PEAKFS" --master "$PEAKFS_MASTER" stat --json /fio-io/copy)
[[ $unit == *'"io_unit":47008'* ]] || { echo "peakfs-posix: I/O unit of the copy: $unit" >&2; exit 1; }
# A directory's unit is its new files' from their creation, whatever sizes the kernel writes.
mkdir "$MNT/fio-io/unit"
xattr "$MNT/fio-io/unit" user.peakfs.io_unit 47008
dd if="$WORK/io-src" of="$MNT/fio-io/unit/copy" bs=4096 status=none
cmp "$WORK/io-src" "$MNT/fio-io/unit/copy" || { echo "peakfs-posix: unit copy differs" >&2; exit 1; }
unit=$(xattr "$MNT/fio-io/unit/copy" user.peakfs.io_unit)
[[ $unit == 47008 ]] || { echo "peakfs-posix: I/O unit of the unit copy: $unit" >&2; exit 1; }
echo "I/O-based copies: ok"
rm -rf "$MNT"/fio-io

echo "== a second mount (another client, through the kernel)"
# What one mount's client closed, the other's reads see: new files, and overwrites of the same
# size in pages the reader's kernel has read before. A kernel keeps names for the mount's entry
# TTL (1 s, attributes none): renames and unlinks show on the other mount after it.
mount_at "$MNT2" "$WORK/mount2.log"
MOUNT2_PID=$MOUNTED_PID
head -c 300000 /dev/urandom >"$WORK/two"
cp "$WORK/two" "$MNT/two"
cmp "$WORK/two" "$MNT2/two"
overwrite() { # MOUNT 4K-PAGE COUNT: the same pages of the copy here and in MOUNT's file
  head -c $(($3 * 4096)) /dev/urandom | dd of="$WORK/two" bs=4096 seek="$2" conv=notrunc status=none
  dd if="$WORK/two" of="$1/two" bs=4096 skip="$2" seek="$2" count="$3" conv=notrunc status=none
}
overwrite "$MNT2" 10 100 # extends the file too
cmp "$WORK/two" "$MNT/two"
overwrite "$MNT" 3 2
cmp "$WORK/two" "$MNT2/two"
# A reader that opened before the writer's close and read nothing yet (its open dropped the
# pages cached by the cmp above) reads the new bytes through that open file.
exec 7<"$MNT2/two"
overwrite "$MNT" 0 1
cmp "$WORK/two" - <&7
exec 7<&-
mkdir "$MNT/two-dir"
mv "$MNT/two" "$MNT/two-dir/moved"
sleep 1.1
[[ ! -e "$MNT2/two" ]] || { echo "peakfs-posix: the other mount's rename is not seen" >&2; exit 1; }
cmp "$WORK/two" "$MNT2/two-dir/moved"
rm -r "$MNT2/two-dir"
sleep 1.1
[[ ! -e "$MNT/two-dir" ]] || { echo "peakfs-posix: the other mount's rm is not seen" >&2; exit 1; }
unmount "$MOUNT2_PID" "$MNT2"
MOUNT2_PID=
echo "second mount: ok"

echo "== tree copy, git clone, sqlite"
run_tree_copy
run_git_clone "$ROOT"
run_sqlite
echo "== fs_mark"
run_fs_mark
echo "== dbench"
run_dbench

echo "== pjdfstest"
run_pjdfstest "$MAX_FAILED"
cp "$WORK/pjdfstest.log" "${PEAKFS_PJDFSTEST_LOG:-/dev/null}" 2>/dev/null || true

echo "== unmount (SIGTERM)"
kill -TERM "$MOUNT_PID"
timeout 20 tail --pid="$MOUNT_PID" -f /dev/null || { echo "peakfs-posix: mount did not exit" >&2; exit 1; }
wait "$MOUNT_PID" || true
MOUNT_PID=
if mountpoint -q "$MNT"; then echo "peakfs-posix: still mounted" >&2; exit 1; fi
echo "peakfs-posix: ok (pjdfstest: $FAILED failed, baseline $MAX_FAILED)"
