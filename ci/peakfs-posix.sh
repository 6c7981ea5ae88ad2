#!/usr/bin/env bash
# POSIX conformance of the PeakFS FUSE mount: a master + 2 servers (ci/peakfs-cluster.sh, on
# localhost), `peakfs mount`, fio --verify jobs (any failure is fatal) and pjdfstest (failures
# counted; more than the recorded baseline is fatal); then SIGTERM unmount and teardown.
# Needs root, /dev/fuse, fio and pjdfstest.
#
#   ci/peakfs-posix.sh
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
  PJDFSTEST=${PJDFSTEST:-$(command -v pjdfstest || echo "$ROOT/.cache/cargo-bin/bin/pjdfstest")}
  for tool in fio "$PJDFSTEST"; do
    command -v "$tool" >/dev/null || { echo "peakfs-posix: $tool is missing" >&2; exit 2; }
  done
  [[ -e /dev/fuse && $(id -u) == 0 ]] || { echo "peakfs-posix: needs root and /dev/fuse" >&2; exit 2; }
  # Two workers per server on any host, so that requests also cross workers (RingSched's
  # forwarding), not only servers.
  export PJDFSTEST PEAKFS_SERVER_WORKERS=${PEAKFS_SERVER_WORKERS:-2}
  exec "$ROOT/ci/peakfs-cluster.sh" --servers 2 -- "$0" --inner
fi

# Inner part: runs inside the cluster (PEAKFS, PEAKFS_MASTER set by peakfs-cluster.sh).
MAX_FAILED=${PEAKFS_PJDFSTEST_MAX_FAILED:-0}
WORK=$(mktemp -d /dev/shm/peakfs-posix.XXXXXX)
chmod 755 "$WORK" # pjdfstest switches to unprivileged users, who must reach the mount
MNT=$WORK/mnt
MOUNT_PID=
cleanup() {
  local rc=$?
  if [[ -n "$MOUNT_PID" ]] && kill -0 "$MOUNT_PID" 2>/dev/null; then
    kill -TERM "$MOUNT_PID" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$MOUNT_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$MOUNT_PID" 2>/dev/null || true
  fi
  if mountpoint -q "$MNT" 2>/dev/null; then fusermount3 -u -z "$MNT" || umount -l "$MNT" || true; fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir "$MNT"
"$PEAKFS" --master "$PEAKFS_MASTER" --timeout-ms 5000 mount "$MNT" >"$WORK/mount.out" 2>"$WORK/mount.log" &
MOUNT_PID=$!
for _ in $(seq 200); do mountpoint -q "$MNT" && break; sleep 0.05; done
mountpoint -q "$MNT" || { cat "$WORK/mount.log"; echo "peakfs-posix: no mount" >&2; exit 1; }

echo "== fio --verify"
fio_job randwrite --rw=randwrite
fio_job seqwrite --rw=write --bs=64k
fio_job randrw --rw=randrw --verify=md5 --size=16M
fio_job n1-47008 --rw=write --bs=47008 --size=16M
rm -f "$MNT"/fio-*

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
