#!/usr/bin/env bash
# A/B of two gofs binaries in one run, alternating: 4 KiB random and sequential reads against
# the raw controller measured in the same `gofs bench` run.
# Usage: bash bench/gofs-ab.sh OLD_BIN NEW_BIN [ROUNDS]   (JSON lines into $OUT or /tmp)
set -u
old=$1; new=$2; rounds=${3:-2}; O=${OUT:-/tmp}
for i in $(seq "$rounds"); do
  for g in "$old" "$new"; do
    timeout 200 "$g" bench --image /dev/shm/ab.img --image-mib 1024 --files 2000 --json > $O/gofs-ab.tmp 2>/tmp/ab.err \
      || { echo "FAILED $g"; tail -3 /tmp/ab.err; }
    cat $O/gofs-ab.tmp >> $O/gofs-ab.jsonl; rm -f /dev/shm/ab.img
    python3 - "$(basename "$g")" $O/gofs-ab.tmp <<'PY'
import json, sys
rs = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
get = lambda w: next((r for r in rs if r["workload"] == w), {})
rr, sr, mb = get("randread-4k"), get("seqread-4k"), get("multifile-read-batch")
print(f'{sys.argv[1]:14} randread {rr.get("iops",0):9.0f} ({rr.get("extra",{}).get("ratio_to_raw",0):.3f} of raw)'
      f'  seqread {sr.get("iops",0):9.0f} ({sr.get("extra",{}).get("ratio_to_raw",0):.3f})'
      f'  batch/per-file {mb.get("extra",{}).get("speedup_vs_perfile",0):.2f}x')
PY
  done
done
