#!/usr/bin/env bash
# SwarmIO A/B in one device call: GPU bounce slots of one 4 KiB page per 512 B transfer (the old
# layout, --slot-bytes 4096) against slots packed eight to a page (the default now).
# Usage: BIN=gpu-run/bin bash bench/swarmio-slots.sh   (JSON lines into $OUT or /tmp)
set -uo pipefail
here=$(dirname "$0")
BUNDLE=${BIN:-gpu-run/bin}/..
source "$here/swarmio-pinning.sh" --functions-only
sw=${BIN:-gpu-run/bin}/swarmio
out=${OUT:-/tmp}/swarmio-slots.jsonl; : > "$out"
nproc; lscpu | grep -E "Model name|^L3"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u
for i in 1 2; do
  for s in 4096 0; do printf 'slot %-5s' $s; run --target-miops 40 --units 4 --workers 3 --slot-bytes $s; done
done
for s in 4096 0; do printf 'slot %-5s' $s; run --target-miops 200 --units 4 --workers 3 --slot-bytes $s; done
for t in 20 30; do printf 'slot %-5s' 0; run --target-miops $t --units 4 --workers 3; done
printf 'slot %-5s' 0; run --target-miops 40 --units 4 --workers 3 --fill
printf 'slot %-5s' 0; run --target-miops 40 --units 4 --workers 3 --prefetch-ahead 16
