# Shared by ci/gofs-posix.sh and ci/peakfs-posix.sh (sourced): fio --verify jobs and pjdfstest on
# the mount $MNT, with their files under $WORK. $NAME prefixes the error messages.

# fio_job JOB FIO-ARGS...: one fio job with verification on $MNT; any failure ends the script.
fio_job() {
  # fio writes its verify state files (JOB-0-verify.state) into the cwd: keep them in $WORK.
  (cd "$WORK" && timeout 300 fio --output-format=terse --name="$1" --directory="$MNT" \
    --filename="fio-$1" --size=32M --bs=4k --ioengine=psync --verify=crc32c --verify_fatal=1 \
    --do_verify=1 "${@:2}" >"$WORK/fio-$1.log" 2>&1) \
    || { cat "$WORK/fio-$1.log"; echo "$NAME: fio job $1 failed" >&2; exit 1; }
  echo "fio $1: ok"
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
