# Shared by ci/gofs-posix.sh and ci/peakfs-posix.sh (sourced): fio --verify jobs, fs_mark,
# dbench and pjdfstest on the mount $MNT, with their files under $WORK. $NAME prefixes the error
# messages.

# fio_job JOB FIO-ARGS...: one fio job with verification on $MNT; any failure ends the script.
fio_job() {
  # fio writes its verify state files (JOB-0-verify.state) into the cwd: keep them in $WORK.
  (cd "$WORK" && timeout 300 fio --output-format=terse --name="$1" --directory="$MNT" \
    --filename="fio-$1" --size=32M --bs=4k --ioengine=psync --verify=crc32c --verify_fatal=1 \
    --do_verify=1 "${@:2}" >"$WORK/fio-$1.log" 2>&1) \
    || { cat "$WORK/fio-$1.log"; echo "$NAME: fio job $1 failed" >&2; exit 1; }
  echo "fio $1: ok"
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
