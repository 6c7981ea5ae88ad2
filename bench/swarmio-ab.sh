#!/usr/bin/env bash
# A/B of two swarmio binaries in one device call, alternating, GPU-initiated 512 B reads.
# Usage: bash bench/swarmio-ab.sh OLD_BIN NEW_BIN [ROUNDS]   (JSON lines into $OUT or /tmp)
set -uo pipefail
here=$(dirname "$0")
source "$here/swarmio-pinning.sh" --functions-only
old=$1; new=$2; rounds=${3:-2}
out=${OUT:-/tmp}/swarmio-ab.jsonl; : > "$out"
for i in $(seq "$rounds"); do
  for sw in "$old" "$new"; do printf '%-28s' "$(basename "$sw")"; run --target-miops 40 --units 4 --workers 3; done
done
sw=$new
for t in 20 30 200; do printf '%-28s' "$(basename "$sw")"; run --target-miops $t --units 4 --workers 3; done
