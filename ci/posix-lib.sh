# Shared by ci/gofs-posix.sh and ci/peakfs-posix.sh (sourced): fio --verify jobs, a tree copied
# with tar, a git clone, SQLite databases, fs_mark, dbench and pjdfstest on the mount $MNT, with
# their files under $WORK. $NAME prefixes the error messages.

# fio_job JOB FIO-ARGS...: one fio job with verification on $MNT; any failure ends the script.
fio_job() {
  # fio writes its verify state files (JOB-0-verify.state) into the cwd: keep them in $WORK.
  (cd "$WORK" && timeout 300 fio --output-format=terse --name="$1" --directory="$MNT" \
    --filename="fio-$1" --size=32M --bs=4k --ioengine=psync --verify=crc32c --verify_fatal=1 \
    --do_verify=1 "${@:2}" >"$WORK/fio-$1.log" 2>&1) \
    || { cat "$WORK/fio-$1.log"; echo "$NAME: fio job $1 failed" >&2; exit 1; }
  echo "fio $1: ok"
}

# run_tree_copy: a tree made in $WORK from /usr/include/linux (hundreds of headers in nested
# directories), with symbolic links (one dangling), a hard link, a FIFO, a sticky directory,
# odd modes and old mtimes, is copied onto $MNT by tar (-p); then its contents (diff -r) and a
# listing of every entry's type, mode, size (of files), link count, mtime (to the nanosecond)
# and link target must match the source's, and removing it must succeed.
run_tree_copy() {
  local src=$WORK/tree-src
  mkdir "$src" "$MNT/tree"
  cp -a /usr/include/linux "$src/linux"
  ln -s linux/fs.h "$src/fs-symlink"
  ln -s ../no/such/file "$src/dangling"
  ln "$src/linux/fs.h" "$src/fs-hardlink"
  mkfifo -m 0620 "$src/fifo"
  mkdir -m 1777 "$src/sticky"
  echo private >"$src/sticky/file"
  chmod 0600 "$src/sticky/file"
  chmod 0751 "$src/linux/netfilter"
  touch -h -d '2001-02-03 04:05:06.123456789' "$src/linux/kernel.h" "$src/fs-symlink"
  touch -d '1999-12-31 23:59:59.5' "$src/linux/netfilter"
  # The POSIX (pax) format keeps the nanoseconds of the times.
  tar -C "$src" --format=posix -cf - . | tar -C "$MNT/tree" -xpf - \
    || { echo "$NAME: tar could not copy the tree" >&2; exit 1; }
  # diff -r calls any two FIFOs different; the listing compares the FIFO.
  diff -r --no-dereference --exclude=fifo "$src" "$MNT/tree" >"$WORK/tree.diff" 2>&1 \
    || { head -20 "$WORK/tree.diff"; echo "$NAME: the copied tree differs" >&2; exit 1; }
  listing() {
    (cd "$1" && find . -type d -printf '%p %y %m %n %T@\n' -o -printf '%p %y %m %s %n %T@ %l\n' \
      | sort)
  }
  listing "$src" >"$WORK/tree.listing"
  diff "$WORK/tree.listing" <(listing "$MNT/tree") >"$WORK/tree.diff" \
    || { head -20 "$WORK/tree.diff"; echo "$NAME: the copied tree's metadata differs" >&2; exit 1; }
  rm -r "$MNT/tree" "$src" || { echo "$NAME: removing the copied tree failed" >&2; exit 1; }
  echo "tree copy: ok ($(wc -l <"$WORK/tree.listing") entries)"
}

# run_git_clone SRC: git clones the repository SRC onto $MNT over git's own protocol (pack
# transfer, index-pack, lock files, renames, fsyncs), then `git fsck --full --strict` (reads
# every object back) and `git status` (stats the checkout against its index) must find nothing
# wrong. Skipped, saying so, when SRC is not a git checkout.
run_git_clone() {
  local src=$1 changes
  if ! git -C "$src" rev-parse --git-dir >/dev/null 2>&1; then
    echo "git clone: skipped ($src is not a git checkout)"
    return 0
  fi
  (cd "$WORK" && timeout 300 git clone -q --no-local "$src" "$MNT/clone" \
    && timeout 300 git -C "$MNT/clone" fsck --full --strict) >"$WORK/git.log" 2>&1 \
    || { tail -20 "$WORK/git.log"; echo "$NAME: git clone or fsck failed" >&2; exit 1; }
  changes=$(git -C "$MNT/clone" status --porcelain) \
    || { echo "$NAME: git status failed in the clone" >&2; exit 1; }
  [[ -z $changes ]] || { echo "$changes" | head; echo "$NAME: the clone's checkout differs" >&2; exit 1; }
  rm -rf "$MNT/clone" || { echo "$NAME: removing the clone failed" >&2; exit 1; }
  echo "git clone: ok ($(git -C "$src" rev-list --count HEAD) commits, fsck and status clean)"
}

# run_sqlite: a SQLite database in each journal mode, rollback (DELETE) and WAL, built,
# vacuumed and checked on $MNT by ci/sqlite-check.py; then the databases are removed. Any
# failure ends the script.
run_sqlite() {
  local mode out
  for mode in DELETE WAL; do
    out=$(cd "$WORK" && timeout 300 python3 "$(dirname "${BASH_SOURCE[0]}")/sqlite-check.py" \
      "$MNT/sqlite-$mode.db" "$mode" 2>&1) \
      || { echo "$out"; echo "$NAME: SQLite in $mode mode failed" >&2; exit 1; }
    echo "sqlite $out"
  done
  rm -f "$MNT"/sqlite-* || { echo "$NAME: removing the databases failed" >&2; exit 1; }
}

# run_fs_mark: fs_mark (Debian's fsmark) on $MNT, 2 threads over 8 subdirectories each: 2 loops
# in which every thread creates 100 files, writes 3,901 bytes to each in 1,000-byte writes,
# fsyncs and closes it, keeping them all (-k). Then every file must be there and read back as
# its 3,901 zero bytes (what fs_mark writes), and removing them must succeed. Any failure ends
# the script.
run_fs_mark() {
  local files=100 threads=2 loops=2 size=3901 expected found
  # fs_mark takes directory names under 40 bytes, so it runs in $MNT (its fs_log.txt goes there).
  (cd "$MNT" && timeout 300 fs_mark -d fsmark-a -d fsmark-b -D 8 -N 16 -n "$files" -s "$size" \
    -w 1000 -L "$loops" -S 1 -k >"$WORK/fs_mark.log" 2>&1) \
    || { cat "$WORK/fs_mark.log"; echo "$NAME: fs_mark failed" >&2; exit 1; }
  expected=$((files * threads * loops))
  found=$(find "$MNT"/fsmark-[ab] -type f | wc -l)
  ((found == expected)) || { echo "$NAME: fs_mark left $found files, not $expected" >&2; exit 1; }
  find "$MNT"/fsmark-[ab] -type f -print0 | xargs -0 cat \
    | cmp - <(head -c $((expected * size)) /dev/zero) \
    || { echo "$NAME: the files fs_mark wrote do not read back" >&2; exit 1; }
  rm -r "$MNT"/fsmark-[ab] "$MNT/fs_log.txt" || { echo "$NAME: removing fs_mark's files failed" >&2; exit 1; }
  echo "fs_mark: ok ($expected files, $(awk '$1 ~ /^[0-9]+$/ {print $4}' "$WORK/fs_mark.log" \
    | paste -sd/) files/s)"
}

# run_dbench: dbench (Debian's) on $MNT for 20 s with 4 clients replaying its NetBench load
# (creates, renames, unlinks, directory listings, attribute changes, reads, writes, byte-range
# locks, flushes). dbench checks the result of every operation against the load file's and
# exits non-zero on the first mismatch, which ends the script.
run_dbench() {
  mkdir "$MNT/dbench"
  (cd "$WORK" && timeout 180 dbench -D "$MNT/dbench" -t 20 4 -c /usr/share/dbench/client.txt \
    >"$WORK/dbench.log" 2>&1) \
    || { grep -v execute "$WORK/dbench.log" | tail -40; echo "$NAME: dbench failed" >&2; exit 1; }
  rm -r "$MNT/dbench" || { echo "$NAME: removing dbench's directory failed" >&2; exit 1; }
  echo "dbench: ok ($(grep -E '^Throughput' "$WORK/dbench.log"))"
}

# run_pjdfstest MAX_FAILED: pjdfstest ($PJDFSTEST) on $MNT/pjd; ends the script when it does not
# finish or fails more tests than MAX_FAILED. Sets FAILED.
run_pjdfstest() {
  local max_failed=$1 summary
  cat >"$WORK/pjdfstest.toml" <<'TOML'
[features]
utimensat = {}
utime_now = {}
rename_ctime = {}
[settings]
naptime = 0.01
allow_remount = false
[dummy_auth]
entries = [["nobody", "nogroup"], ["daemon", "daemon"]]
TOML
  mkdir "$MNT/pjd"
  # shellcheck disable=SC2086 # patterns are words
  (cd "$WORK" && NO_COLOR=1 timeout 600 "$PJDFSTEST" -c "$WORK/pjdfstest.toml" -p "$MNT/pjd" \
    ${PJDFSTEST_PATTERNS:-} >"$WORK/pjdfstest.log" 2>&1) || true
  grep -E "FAILED" "$WORK/pjdfstest.log" | awk '{print "  " $1}' || true
  summary=$(grep -E "^Summary" "$WORK/pjdfstest.log" || true)
  [[ -n "$summary" ]] || { tail -40 "$WORK/pjdfstest.log"; echo "$NAME: pjdfstest did not finish" >&2; exit 1; }
  echo "$summary"
  FAILED=$(sed -E 's/^Summary: ([0-9]+) failed.*/\1/' <<<"$summary")
  if ((FAILED > max_failed)); then
    echo "$NAME: $FAILED pjdfstest failures, more than the baseline $max_failed" >&2
    exit 1
  fi
}
